"""A reply's first token from the prompt's pass, against the flow before (this folder's README,
"The first token from the prompt's pass (kept)").

Before 2026-12-08 a reply read its prompt but the last token into the target's cache, and its first
step drafted, then verified the prompt's last token with the drafts: the first token waited for the
draft's own prompt pass and a whole step. Now the first step is the prompt's pass, undrafted, and
its last row gives the first token. ``FirstStepDrafted`` below is the flow before, for this run: a
copy of the loop as it stood at 1800c2e, kept whole so that the old flow is measured as it ran.

Each suite prompt (128 new tokens, greedy, default settings, fresh caches): target-only and `hybrid`
on each flow, two engines of each flow over one loaded pair, the six replies in an order rotating
from prompt to prompt. Per category: each side's time to its first token, and new / old for that
time and for tokens per second, paired per prompt (the mean of each flow's two engines). The rule,
written before the run: 2026-12-08-first-token-rule.txt.

Run: .venv/bin/python docs/benchmarks/2026-12-08-first-token.py
Output of 2026-12-08 (Zen 4 EPYC): 2026-12-08-first-token.txt beside this file.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence

import torch
from paired_levers import decoded, engine_with

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.decoder import (
    DecodeParams,
    Event,
    Failures,
    FinishedEvent,
    PromptTooLongError,
    SpeculativeDecoder,
    StepEvent,
    Token,
    origin,
)
from specdec_tui.engine.detokenizer import IncrementalDetokenizer
from specdec_tui.engine.drafters import Drafter, Sampler
from specdec_tui.engine.metrics import RunSummary, StepRecord, summarize
from specdec_tui.engine.resilience import ModelFailure
from specdec_tui.engine.session import Engine
from specdec_tui.runtime import load_runtime


class FirstStepDrafted(SpeculativeDecoder):
    """The loop before 2026-12-08: the prompt but its last token read first, every step drafted."""

    def generate(self, prompt_ids: Sequence[int], params: DecodeParams, drafter: Drafter | None = None,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        if len(prompt_ids) >= self.max_context:
            raise PromptTooLongError("the prompt does not fit")
        generator = torch.Generator()
        generator.manual_seed(params.seed if params.seed is not None else torch.seed())
        sampler = Sampler(params.temperature, params.top_p, generator)
        text = IncrementalDetokenizer(self.tokenizer)
        context = list(prompt_ids)
        records: list[StepRecord] = []
        ttft: float | None = None
        finish = "length"
        failures = Failures()
        start = time.perf_counter()
        try:
            self.target.prefill(context[:-1])
        except ModelFailure:  # the step after reads the prompt then (no pass fails in these runs)
            pass
        while (generated := len(context) - len(prompt_ids)) < params.max_new_tokens:
            room = min(params.max_new_tokens - generated, self.max_context - len(context))
            if room <= 0:
                finish = "context"
                break
            k = min(params.k, room - 1) if drafter is not None else 0
            step = self.resilient_step(context, drafter, k, room, params, sampler, failures)
            if step is None:
                if failures.stopped:
                    finish = "failed"
                    break
                continue
            draft, emitted, hit_eos, record = step
            if not record.degraded:
                self.verify_cost.observe(record, len(context))
                if drafter is not None:
                    drafter.observe(record, draft.source)
            context.extend(emitted)
            records.append(record)
            ttft = ttft if ttft is not None else time.perf_counter() - start
            yield StepEvent(tuple(Token(t, origin(i, record), text.push(t)) for i, t in enumerate(emitted)), record,
                            self.rejected(draft, record, emitted))
            if hit_eos:
                finish = "eos"
                break
        summary = summarize(records, mode=drafter.name if drafter is not None else "target",
                            prompt_tokens=len(prompt_ids), seconds=time.perf_counter() - start, ttft_s=ttft or 0.0,
                            finish_reason=finish, target_failures=failures.target, draft_failures=failures.draft,
                            failure=failures.reason)
        generated_ids = tuple(context[len(prompt_ids):])
        yield FinishedEvent(summary, generated_ids, self.tokenizer.decode(generated_ids, skip_special_tokens=True))

runtime = load_runtime(Settings())
params = runtime.params(max_new_tokens=128)
engines: dict[str, Engine] = {}
for name in ("old A", "old B", "new W", "new X"):
    engines[name] = engine_with(runtime)
    if name.startswith("old"):
        engines[name].decoder.__class__ = FirstStepDrafted
# (side, engine): target-only on one engine of each flow, `hybrid` on all four
sides = [("target", "old A"), ("target", "new W"), ("hybrid", "old A"), ("hybrid", "old B"),
         ("hybrid", "new W"), ("hybrid", "new X")]


def reply(ids: list[int], mode: str, engine: Engine) -> FinishedEvent:
    return decoded(engine, ids, params, None if mode == "target" else engine.drafter("hybrid", params))


def mean_of(summaries: dict[str, RunSummary], key: str, names: Sequence[str]) -> float:
    """The mean of ``key`` over the `hybrid` replies of the engines ``names``."""
    return statistics.mean(getattr(summaries[f"hybrid {name}"], key) for name in names)


warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
for mode, name in sides:
    reply(warm, mode, engines[name])

ttft: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
ratio: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
for i, item in enumerate(load_suite(default_suite_path())):
    ids = runtime.prompt_ids(item.messages)
    order = sides[i % len(sides):] + sides[:i % len(sides)]
    results = {(mode, name): reply(ids, mode, engines[name]) for mode, name in order}
    first = results["target", "old A"].token_ids
    assert all(event.token_ids == first for event in results.values()), item.id  # rule 1
    summaries = {f"{mode} {name}": event.summary for (mode, name), event in results.items()}

    old_ttft, new_ttft = (mean_of(summaries, "ttft_s", names) for names in (("old A", "old B"), ("new W", "new X")))
    old_rate, new_rate = (mean_of(summaries, "tokens_per_s", names) for names in (("old A", "old B"), ("new W", "new X")))
    target_old, target_new = summaries["target old A"], summaries["target new W"]
    by = ttft[item.category]
    by["hybrid old"].append(old_ttft)
    by["hybrid new"].append(new_ttft)
    by["target old"].append(target_old.ttft_s)
    by["target new"].append(target_new.ttft_s)
    r = ratio[item.category]
    r["hybrid first token new / old"].append(new_ttft / old_ttft)
    r["hybrid tok/s new / old"].append(new_rate / old_rate)
    r["hybrid tok/s W / X (identical engines)"].append(summaries["hybrid new W"].tokens_per_s
                                                       / summaries["hybrid new X"].tokens_per_s)
    r["target-only tok/s new / old"].append(target_new.tokens_per_s / target_old.tokens_per_s)
    r["hybrid / target-only, new"].append(new_rate / target_new.tokens_per_s)
    r["hybrid / target-only, old"].append(old_rate / target_old.tokens_per_s)
    print(f"{item.category:15s} {item.id:20s} prompt {len(ids):3d}, {len(first)} tokens, all identical | first token: "
          f"hybrid old {old_ttft:.2f} s, new {new_ttft:.2f} s; target-only old {target_old.ttft_s:.2f} s, new "
          f"{target_new.ttft_s:.2f} s | hybrid tok/s old {old_rate:.1f}, new {new_rate:.1f} ({new_rate / old_rate:.3f}); "
          f"target-only old {target_old.tokens_per_s:.1f}, new {target_new.tokens_per_s:.1f}", flush=True)

for category, by_side in ttft.items():
    print(f"{category}: first token, median s: " + ", ".join(
        f"{side} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
        for side, values in by_side.items()))
    for name, values in ratio[category].items():
        print(f"  {name}: median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})")
