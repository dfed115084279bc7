"""The paired lever run of 2026-12-03 for branches placed where the draft doubted (this folder's README,
"Branches where the draft doubts, paired").

Interleaved per prompt in one process (the order rotates from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, drafts that stop by confidence);
each variant has its own engine (its own policies and verify-cost table) over the one loaded pair:

- target: target-only decoding;
- F0: hybrid as it was before these changes: branches at the draft's first b positions, b planned
  with the draft length before drafting; after a kept branch, a next pass with branches first read
  the branch and the target's token after it in a pass of their own; the verify-cost table
  averaged every pass as measured;
- S: F0, but those two tokens share the next pass;
- C: S, with each pass clipped to within a quarter of what the verify-cost table expected of it;
- D: C, with branches where the draft doubted (today's placement), the plan still counting b
  branches at the first positions (today's default);
- N: D, with the length planned without branches (tried; not kept);
- D8: D at K = 8 (tried twice, `D D8`: -3.txt and -4.txt).

Run: .venv/bin/python docs/benchmarks/2026-12-03-doubted-branches.py F0 S C D N
Every variant is compared with the first, paired per prompt; the outputs of that morning are
2026-12-03-doubted-branches-*.txt beside this file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from paired_levers import Reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import Branch, WrappedRunner, forward
from specdec_tui.engine.decoder import FinishedEvent, StepEvent
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import DraftPolicy, VerifyCost, _ema
from specdec_tui.runtime import build_engine, load_runtime


class FirstPositions(DraftPolicy):
    """Branches at the first b positions, b planned with the draft length."""

    planned = 0

    def plan(self, k_max: int, branching: bool = False) -> tuple[int, int]:
        k, self.planned = super().plan(k_max, branching)
        return k, self.planned

    def place_branches(self, confidences: Sequence[float]) -> list[int]:
        return list(range(min(self.planned, len(confidences))))


class PlainPlan(DraftPolicy):
    def plan(self, k_max: int, branching: bool = False) -> tuple[int, int]:
        return super().plan(k_max)


class UnclippedCost(VerifyCost):
    def observe(self, record: StepRecord) -> None:
        self.measured[record.rows] = _ema(self.measured.get(record.rows), record.verify_s)


class PassBeforeBranches(WrappedRunner):
    """Tokens before the scored block in a pass of their own whenever the block has branches."""

    def forward(self, ids: list[int], n_logits: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        if branches and len(ids) > n_logits:
            forward(self.runner, ids[: len(ids) - n_logits], 1, ())
            ids = ids[len(ids) - n_logits :]
        return forward(self.runner, ids, n_logits, branches)


VARIANTS = sys.argv[1:] or ["F0", "S", "C", "D", "N"]
runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}
for name, engine in engines.items():
    if name in ("F0", "S"):
        engine.decoder.verify_cost = UnclippedCost()
    if name == "F0":
        engine.target.runner = PassBeforeBranches(engine.target.runner)
    if name in ("F0", "S", "C"):
        engine.policies["model"] = FirstPositions(engine.decoder.verify_cost)
    if name == "N":
        engine.policies["model"] = PlainPlan(engine.decoder.verify_cost)


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    params = runtime.params(max_new_tokens=128, **({"k": 8} if name == "D8" else {}))
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    engine.reset()
    branches = kept = 0
    for event in engine.decoder.generate(ids, params, drafter):
        if isinstance(event, StepEvent):
            branches += event.record.branches
            kept += event.record.branch_kept
        if isinstance(event, FinishedEvent):
            return event.token_ids, event.summary, f"branches {branches}, kept {kept}"
    raise RuntimeError("a reply ended without its summary")


print_paired(interleaved(runtime, VARIANTS, run), [(name, VARIANTS[0]) for name in VARIANTS[1:]])
