"""The paired lever run for the draft's third choice beside a branch's runner-up (this folder's
README, "A third choice where the draft doubts").

Offline (`2026-12-06-deeper-trees-offline.py`), where the draft gave its own token under 0.6, the
target's token was the draft's third choice at 3-9% of positions, about a seventh of those where
the draft's token was rejected; on this host a verify row past the second costs a small share of a
pass, so a third-choice row at a position the chain likely reaches may pay. Variant W offers it:
once `hybrid`'s policy has placed its runner-up branches, each such position also offers the
draft's third choice while its expected extra token (the chance that the chain is kept up to the
position and rejected there, times how often a third choice at that confidence was the target's,
learnt online from a prior of 0.15) pays for one more row at the policy's rate, as a runner-up's
must. A and B are `hybrid` as it is, W and X the variant, two engines of each (the spread between
two identical engines is the run's noise), and target-only an engine of its own; all interleaved
per prompt in one process, the order rotating, all 28 prompts, greedy, 128 new tokens, fresh
caches, default settings; every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-06-third-choices.py
The output of 2026-12-06 (the Xeon with AVX-512 VNNI) is 2026-12-06-third-choices.txt beside this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from paired_levers import Reply, decoded, engine_with, interleaved, print_paired, two_engine_pairs

from specdec_tui.config import Settings
from specdec_tui.engine import decoder
from specdec_tui.engine.acceptance import Verdict
from specdec_tui.engine.cached_model import Branch
from specdec_tui.engine.drafters import HybridDrafter, ModelDrafter, second_best
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import AcceptanceByConfidence
from specdec_tui.runtime import load_runtime

THIRD_HIT_PRIOR = 0.15
verdicts: list[Verdict] = []
verify_block = decoder.verify_block


def remembered_verdict(*args, **kwargs) -> Verdict:
    """The decoder's verdict, kept so the drafter can tell which branch the target took."""
    verdicts.append(verify_block(*args, **kwargs))
    return verdicts[-1]


decoder.verify_block = remembered_verdict


def third_best(logits: torch.Tensor, best: int, runner_up: int) -> int:
    """The draft's third choice: ``second_best`` once ``best`` is out of the running; -1 if none."""
    others = logits.clone()
    others[best] = float("-inf")
    return second_best(others, runner_up)


class ThirdChoices(ModelDrafter):
    """The model draft with the draft's third choice beside a runner-up branch where it pays."""

    def __init__(self, drafter: ModelDrafter) -> None:
        super().__init__(drafter.model, drafter.vocab_size, drafter.min_confidence, drafter.policy, drafter.branching)
        if not hasattr(self.policy, "third_hit"):
            self.policy.third_hit = AcceptanceByConfidence(prior=THIRD_HIT_PRIOR)
        self.thirds: dict[int, int] = {}

    def place_thirds(self, rows: int) -> list[int]:
        """The runner-up positions whose third choice pays for a row (as ``place_branches``)."""
        policy, gains, chain = self.policy, [], 1.0
        for position, confidence in enumerate(self.confidences):
            kept = policy.by_confidence(confidence)
            if position in self.branched:
                gains.append((chain * (1.0 - kept) * policy.third_hit(confidence), position))
            chain *= kept
        chosen = []
        for gain, position in sorted(gains, reverse=True):
            if gain < policy.rate * policy.verify_cost.extra_row(rows):
                break
            chosen.append(position)
            rows += 1
        return chosen

    def _branches(self, tokens: list[int], logits: list[torch.Tensor]) -> list[Branch]:
        branches = super()._branches(tokens, logits)
        self.thirds = {}
        if not branches:
            return branches
        runner_ups = dict(branches)
        for position in self.place_thirds(len(tokens) + 1 + len(branches)):
            if (third := third_best(logits[position], tokens[position], runner_ups[position])) >= 0:
                self.thirds[position] = third
        # A position's runner-up before its third choice: at tau < 1 the first that passes is kept.
        return [pair for i, runner_up in branches
                for pair in ((i, runner_up), *(((i, self.thirds[i]),) if i in self.thirds else ()))]

    def observe(self, record: StepRecord, source: str) -> None:
        if self.policy is None or source != self.name:
            return
        at = record.accepted - 1
        third_kept = record.branch_kept and self.thirds.get(at) == verdicts[-1].branch
        if third_kept:  # to the runner-up's estimates, the chain stopped at the third's position
            record = replace(record, accepted=at, branch_kept=False)
        super().observe(record, source)
        chain = record.accepted - record.branch_kept
        if chain < record.drafted and chain in self.thirds:
            self.policy.third_hit.record(self.confidences[chain], third_kept)


def with_thirds(drafter: HybridDrafter) -> HybridDrafter:
    return HybridDrafter(drafter.lookup, ThirdChoices(drafter.model), drafter.copy_policy)


def run(ids: list[int], name: str) -> Reply:
    engine, params = engines[name], runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if name in NEW:
        drafter = with_thirds(drafter)
    verdicts.clear()
    event = decoded(engine, ids, params, drafter)
    thirds = ""
    if name in NEW:
        policy = drafter.model.policy
        thirds = " thirds kept " + " ".join(f"{policy.third_hit.kept[i] / policy.third_hit.judged[i]:.2f}"
                                            for i in range(len(policy.third_hit.kept)))
    return event.token_ids, event.summary, f"{event.summary.drafted} drafted{thirds}" if drafter else ""


NEW, OLD = ["W", "X"], ["A", "B"]
runtime = load_runtime(Settings())
# Target-only gets an engine of its own too: an engine's verify-cost table learns from every pass.
engines = {name: engine_with(runtime) for name in ["target", *OLD, *NEW]}
variants: Sequence[str] = [*OLD, *NEW]
print_paired(interleaved(runtime, variants, run), two_engine_pairs(NEW, OLD))
