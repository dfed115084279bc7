"""The paired lever runs of 2026-12-03 (this folder's README, "Drafting by confidence, paired").

Interleaved per prompt in one process (the order rotates from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings otherwise; each variant has its own engine
(its own adaptive-K policies and verify-cost table) over the one loaded pair. A variant is named
by its draft rule and its K:

- target: target-only decoding;
- P<K>: the previous rule: hybrid, each model draft as long as the length the policy chose for the
  step up front from the average acceptance, at most K;
- C<K>: the draft goes on token by token while the next one is expected to pay, from the draft's
  confidence in the tokens so far (today's rule), at most K;
- R<K>: C<K>, but the next token must add tokens at the rate the reply's recent steps achieved
  (every step, copies included, from the second on) rather than the rate the model policy expects.

Run: .venv/bin/python docs/benchmarks/2026-12-03-vnni-confidence.py P4 P6 C6
Every variant is compared with the first, paired per prompt; the output of that night is
2026-12-03-vnni-confidence-2.txt beside this file, and that of `P4 C6 R6` run after it
2026-12-03-vnni-confidence-3.txt. An hour before, a first version of the rule
(the next token had to add tokens at this step's own expected rate, not the policy's) ran as
P4 / C4 / C6, there named C / D / E: 2026-12-03-vnni-confidence-1.txt.

This script runs on the engine of the day it is run: since the morning of 2026-12-03 its
branches go where the draft doubts, a kept branch shares the next pass, and the verify-cost table
clips each pass (2026-12-03-doubted-branches.py); so a run today measures its variants' rules on
that engine, not the engine of the output beside it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from paired_levers import PlannedLength, Reply, decoded, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import DraftPolicy
from specdec_tui.runtime import build_engine, load_runtime


class RecentRate(DraftPolicy):
    """Today's rule against the tokens per second of the reply's recent steps, whoever drafted them."""

    tokens = seconds = 0.0

    def see(self, record: StepRecord) -> None:
        self.tokens = 0.9 * self.tokens + record.emitted
        self.seconds = 0.9 * self.seconds + record.seconds

    def keep_drafting(self, confidences: Sequence[float], branches: int) -> bool:
        if self.seconds:
            self.rate = self.tokens / self.seconds
        return super().keep_drafting(confidences, branches)


VARIANTS = sys.argv[1:] or ["P4", "P6", "C6"]
runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}
for name, engine in engines.items():
    if name.startswith("P"):
        engine.policies["model"] = PlannedLength(engine.decoder.verify_cost)
    if name.startswith("R"):
        engine.policies["model"] = RecentRate(engine.decoder.verify_cost)


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    params = runtime.params(max_new_tokens=128, k=4 if name == "target" else int(name[1:]))
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if name.startswith("R"):
        policy, model_observe, steps = engine.policies["model"], drafter.model.observe, []

        def observe(record: StepRecord, source: str) -> None:
            if steps:  # the first step's time is mostly the prompt's
                policy.see(record)
            steps.append(record)
            model_observe(record, source)

        drafter.model.observe = observe
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, f"drafted {event.summary.drafted}"


print_paired(interleaved(runtime, VARIANTS, run), [(name, VARIANTS[0]) for name in VARIANTS[1:]])
