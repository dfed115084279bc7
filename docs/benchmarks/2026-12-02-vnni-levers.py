"""The paired lever run of 2026-12-02 (this folder's README, "Branches and longer copies, paired").

Interleaved per prompt in one process (the order rotates from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings otherwise; each variant has its own engine
(its own adaptive-K policies and verify-cost table) over the one loaded pair:

- target: target-only decoding;
- A: the previous default: hybrid, copies of at most K (lookup_k 4), no branches, the verify-cost
  table read as measured;
- B: copies of up to 8 tokens, the table capped (fewer rows never dearer than more);
- C: B with branches, draft length and branch count chosen together (today's default).

Today's defaults differ (K = 6, drafts that stop by confidence), so every variant here is pinned to
that day's K = 4 and its up-front draft length.

Run: .venv/bin/python docs/benchmarks/2026-12-02-vnni-levers.py
Its output of that evening is 2026-12-02-vnni-levers.txt beside it.

This script runs on the engine of the day it is run: since the morning of 2026-12-03 its
branches go where the draft doubts, a kept branch shares the next pass, and the verify-cost table
clips each pass (2026-12-03-doubted-branches.py); so a run today measures its variants' rules on
that engine, not the engine of the output beside it.
"""

from __future__ import annotations

from paired_levers import PlannedLength, Reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent, StepEvent
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.runtime import build_engine, load_runtime


class UncappedVerifyCost(VerifyCost):
    """The table as it was read before: a measurement as it stands, however noisy."""

    def __call__(self, rows: int) -> float:
        return self.measured[rows] if rows in self.measured else self._on_line(rows)


runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in "ABC"}
engines["A"].decoder.verify_cost = UncappedVerifyCost()
for engine in engines.values():
    engine.policies["model"] = PlannedLength(engine.decoder.verify_cost)
#: lookup_k and whether the model draft offers branches, per variant.
VARIANTS = {"A": (4, False), "B": (8, False), "C": (8, True)}


def run(ids: list[int], name: str) -> Reply:
    engine = engines["A" if name == "target" else name]
    lookup_k, branching = VARIANTS.get(name, (4, False))
    params = runtime.params(max_new_tokens=128, k=4, lookup_k=lookup_k)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if drafter is not None:
        drafter.model.branching = branching
    engine.reset()
    kept = branch_steps = 0
    for event in engine.decoder.generate(ids, params, drafter):
        if isinstance(event, StepEvent):
            kept += event.record.branch_kept
            branch_steps += event.record.branches > 0
        elif isinstance(event, FinishedEvent):
            return event.token_ids, event.summary, f"branch steps {branch_steps}, kept {kept}"
    raise RuntimeError("a reply ended without its summary")


print_paired(interleaved(runtime, list(VARIANTS), run), [("B", "A"), ("C", "B"), ("C", "A")])
