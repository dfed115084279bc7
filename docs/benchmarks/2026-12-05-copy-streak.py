"""The paired lever run for a strict lookup whose copy length follows how its previous copy went
(this folder's README, "Copy lengths after the previous copy, paired (not kept)").

Copies come in runs: inside code the reply rewrites, one copy kept whole is often followed by
another, and a copy the target cut short often by more misses. Variant W keeps the lookup's
acceptance as two decayed estimates, one after a copy kept whole and one after a copy cut short,
and plans each copy's length from the one its previous copy left it in; A is `hybrid` as it is (one
estimate). Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28
prompts, greedy, 128 new tokens, fresh caches, default settings, each variant and target-only with
an engine of its own over the one loaded pair; every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-05-copy-streak.py A W
The output of 2026-12-05 is 2026-12-05-copy-streak.txt beside this file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import DraftPolicy, VerifyCost
from specdec_tui.runtime import load_runtime


class StreakPolicy(DraftPolicy):
    """``DraftPolicy`` with its acceptance kept apart after a copy kept whole and after one cut short."""

    def __init__(self, verify_cost: VerifyCost) -> None:
        super().__init__(verify_cost)
        self.after = {state: [self.kept, self.rejected] for state in (True, False)}
        self.whole = False

    @property
    def alpha(self) -> float:
        kept, rejected = self.after[self.whole]
        return kept / (kept + rejected)

    def observe(self, record: StepRecord, cost_is_typical: bool = True, confidences: Sequence[float] = (),
                branched: Sequence[int] = ()) -> None:
        if record.drafted == 0:
            return
        super().observe(record, cost_is_typical, confidences, branched)
        chain = record.accepted - record.branch_kept
        counts = self.after[self.whole]
        counts[0] = self.decay * counts[0] + chain
        counts[1] = self.decay * counts[1] + (chain < record.drafted)
        self.whole = chain == record.drafted


VARIANTS = sys.argv[1:] or ["A", "W"]
runtime = load_runtime(Settings())
# Target-only gets an engine of its own too: an engine's verify-cost table learns from every pass.
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}
for name in VARIANTS:
    if name in "WX":
        engines[name].policies["strict-lookup"] = StreakPolicy(engines[name].decoder.verify_cost)


def run(ids: list[int], name: str) -> Reply:
    return hybrid_reply(runtime, engines[name], ids, name)


print_paired(interleaved(runtime, VARIANTS, run), [("W", "A")])
