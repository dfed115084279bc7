"""Is the rate the draft's stopping rule compares against the rate `hybrid`'s steps achieve?

``DraftPolicy.keep_drafting`` drafts one more token while it is expected to add tokens at least at
``rate``, the tokens per second the step's plan expects (from the drafter's average acceptance and
the measured costs). A plan that expects more than its steps give stops drafts too soon, one that
expects less drafts too long. This decodes each suite prompt with `hybrid` twice on the runtime's
own engine (the first to warm it, as the bench's earlier prompts do), and over the second reply's
model-drafted steps (those whose draft time is typical, not a prompt's reading) prints the plan's
mean rate against the tokens per second those steps achieved.

Run: .venv/bin/python docs/benchmarks/2026-12-06-planned-rate.py
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from paired_levers import mode_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import DraftPolicy
from specdec_tui.runtime import load_runtime

#: (planned rate, tokens emitted, seconds) of each model-drafted step with a typical draft time.
steps: list[tuple[float, int, float]] = []


def recording(observe):  # type: ignore[no-untyped-def]
    def observe_and_record(self: DraftPolicy, record: StepRecord, cost_is_typical: bool = True,
                           confidences: Sequence[float] = (), branched: Sequence[int] = ()) -> None:
        if record.drafted and cost_is_typical and self.rate is not None:
            steps.append((self.rate, record.emitted, record.seconds))
        observe(self, record, cost_is_typical, confidences, branched)
    return observe_and_record


def main() -> None:
    DraftPolicy.observe = recording(DraftPolicy.observe)  # type: ignore[method-assign]
    runtime = load_runtime(Settings())
    ratios: dict[str, list[float]] = defaultdict(list)
    for item in load_suite(default_suite_path()):
        prompt = list(runtime.prompt_ids(item.messages))
        mode_reply(runtime, prompt, "hybrid")
        steps.clear()
        summary = mode_reply(runtime, prompt, "hybrid").summary
        planned = statistics.fmean(rate for rate, _, _ in steps)
        achieved = sum(emitted for _, emitted, _ in steps) / sum(seconds for _, _, seconds in steps)
        ratios[item.category].append(planned / achieved)
        print(f"{item.id}: {len(steps)} model-drafted steps, planned {planned:.1f} tok/s, achieved "
              f"{achieved:.1f}; the whole reply {summary.new_tokens / summary.seconds:.1f}", flush=True)
    for category, values in ratios.items():
        print(f"{category}: planned / achieved, median {statistics.median(values):.3f} "
              f"(lowest {min(values):.3f}, highest {max(values):.3f})")


if __name__ == "__main__":
    main()
