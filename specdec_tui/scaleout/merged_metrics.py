"""The replicas' Prometheus expositions as one: summed across replicas, or each with a ``replica`` label.

Counters, histograms and most gauges add up across replicas (requests, tokens, bucket counts,
requests running and waiting). A circuit's state does not: the merged one is the worst replica's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

#: Gauges merged by their maximum instead of their sum.
WORST_OF = frozenset({"specdec:breaker_state"})

Labels = tuple[tuple[str, str], ...]


def _value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escaped(value)}"' for key, value in labels) + "}"


class _Family:
    def __init__(self, name: str, kind: str, documentation: str) -> None:
        self.name, self.kind, self.documentation = name, kind, documentation
        self.samples: dict[tuple[str, Labels], float] = {}

    def add(self, sample: str, labels: Labels, value: float) -> None:
        key = (sample, labels)
        if key not in self.samples:
            self.samples[key] = value
        elif self.name in WORST_OF:
            self.samples[key] = max(self.samples[key], value)
        else:
            self.samples[key] += value

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.documentation}"
        yield f"# TYPE {self.name} {self.kind}"
        for (sample, labels), value in self.samples.items():
            yield f"{sample}{_labels(labels)} {_value(value)}"


def merge_expositions(expositions: Mapping[str, str], per_replica: bool = False) -> str:
    """One exposition of ``expositions`` (replica -> its text); ``per_replica`` labels instead of summing."""
    families: dict[str, _Family] = {}
    for replica, text in expositions.items():
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(family.name, _Family(family.name, family.type, family.documentation))
            for sample in family.samples:
                if sample.name.endswith("_created"):  # a start time: neither sums nor means anything merged
                    continue
                labels = tuple(sorted(sample.labels.items()))
                if per_replica:
                    labels = (("replica", replica), *labels)
                merged.add(sample.name, labels, sample.value)
    return "".join(line + "\n" for family in families.values() for line in family.lines())
