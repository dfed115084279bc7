"""Branches: the draft's runner-up tokens verified beside its draft in the same target pass."""

from __future__ import annotations

import pytest
import torch
from tiny import prompt, runner_for, tiny_engine, tiny_model

from specdec_tui.engine.acceptance import Verdict, greedy_verdict
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, StepEvent
from specdec_tui.engine.drafters import Draft, ModelDrafter, Sampler
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import DraftPolicy, VerifyCost, best_plan, branch_gain
from specdec_tui.engine.session import Engine
from specdec_tui.models import quantized_kernels

#: The architectures the lean forward runs (transformers' own forward takes no branches).
LEAN_ARCHS = ("qwen2", "llama")
PROMPT = prompt("def add(a, b):\n    return a + b\n\ndef add(a, b):")

needs_kernels = pytest.mark.skipif(not quantized_kernels.available(), reason="the package's kernels do not build here")


def cached(arch: str, precision: str = "int8") -> CachedModel:
    return CachedModel(runner_for(tiny_model(arch), precision))


def host_instruction_sets() -> list[str]:
    return quantized_kernels.instruction_sets() if quantized_kernels.available() else []


@needs_kernels
@pytest.mark.parametrize("arch", LEAN_ARCHS)
@pytest.mark.parametrize("precision", ["int8", "int4"])
@pytest.mark.parametrize("context", [PROMPT, list(range(3, 150))], ids=["short", "past-a-value-block"])
@pytest.mark.parametrize("instruction_set", host_instruction_sets())
def test_a_branch_row_is_bitwise_the_single_step_after_its_own_prefix(arch: str, precision: str,
                                                                       context: list[int], instruction_set: str):
    # Branches where a draft doubts, not only at the first positions: none for draft 1, two for draft 2.
    drafts, branches = [5, 77, 140, 9], [(0, 61), (2, 203), (2, 11), (3, 18)]
    with quantized_kernels.using_instruction_set(instruction_set):
        # As in a reply: the prompt but its last token is read first, then each step feeds a block.
        block, single = cached(arch, precision), cached(arch, precision)
        block.prefill(context[:-1])
        single.prefill(context[:-1])
        assert block.supports_branches
        scored = block.logits_for([*context, *drafts], len(drafts) + 1, branches)
        assert scored.shape[0] == len(drafts) + 1 + len(branches)
        # A cache that has not read the prompt reads it first, the same way.
        assert torch.equal(cached(arch, precision).logits_for([*context, *drafts], len(drafts) + 1, branches), scored)
        chain = [single.logits_for([*context, *drafts[:i]], 1)[0] for i in range(len(drafts) + 1)]
        # Branch (j, token) stands in for draft j: the target after the context, drafts[:j] and the token.
        after_branches = [single.logits_for([*context, *drafts[:j], token], 1)[0] for j, token in branches]
        assert torch.equal(scored, torch.stack([*chain, *after_branches]))
        # The cache keeps the draft, not the branches: the next pass scores like a fresh cache.
        assert block.ids == [*context, *drafts]
        following = block.logits_for([*context, *drafts, 7], 2)
        fresh = cached(arch, precision)
        fresh.prefill(context[:-1])
        assert torch.equal(following, fresh.logits_for([*context, *drafts, 7], 2))


@needs_kernels
@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_after_a_kept_branch_the_next_block_with_branches_is_one_pass_and_still_bitwise(precision: str):
    block, single = cached("qwen2", precision), cached("qwen2", precision)
    block.prefill(PROMPT[:-1])
    block.logits_for([*PROMPT, 5, 77, 140], 3, [(1, 61)])
    # Branch 61 was kept after draft 5, then the target's token 9: the cache has neither yet.
    context, drafts = [*PROMPT, 5, 61, 9], [12, 30]
    rows_fed: list[int] = []
    embed = block.runner.embedding.rows
    block.runner.embedding.rows = lambda ids: rows_fed.append(len(ids)) or embed(ids)  # type: ignore[method-assign]
    scored = block.logits_for([*context, *drafts], 3, [(0, 44)])
    assert rows_fed == [2 + 2 + 1]  # one pass: the branch and the token after it, the drafts, the branch
    chain = [single.logits_for([*context, *drafts[:i]], 1)[0] for i in range(3)]
    assert torch.equal(scored, torch.stack([*chain, single.logits_for([*context, 44], 1)[0]]))


@needs_kernels
def test_a_runner_refuses_branches_for_tokens_it_does_not_score_or_one_token_twice_in_one_line():
    model = cached("qwen2")
    with pytest.raises(ValueError, match=r"cannot verify branches \[0, 1\]"):
        model.logits_for([*PROMPT, 5, 6], 2, [(0, 1), (1, 2)])  # one scored draft token: only (0, _)
    with pytest.raises(ValueError, match=r"cannot verify branches \[1, 1\]"):
        model.logits_for([*PROMPT, 5, 6, 7], 3, [(1, 2), (1, 2)])
    assert model.logits_for([*PROMPT, 5, 6, 7], 3, [(1, 1), (1, 2)]).shape[0] == 5


def test_transformers_forward_does_not_take_branches():
    assert not CachedModel(runner_for(tiny_model("qwen2"), "fp32", fast=False)).supports_branches
    assert not CachedModel(runner_for(tiny_model("gpt2"), "int8")).supports_branches


def test_a_rejected_draft_token_gives_way_to_its_branch_when_the_target_agrees_with_it():
    # Rows: after the last token, after each of the 3 drafts, after each of the 2 branches.
    logits = torch.full((6, 10), -5.0)
    for row, best in enumerate([1, 4, 7, 8, 3, 9]):
        logits[row, best] = 5.0
    drafts = torch.tensor([1, 2, 7])
    # Draft 1 (2) is rejected, its branch (4) is what the target wanted: keep it, then the
    # target's token after the branch comes from the branch's row.
    verdict = greedy_verdict(drafts, logits, 1.0, [(0, 6), (1, 4)])
    assert (verdict.accepted, verdict.branch, verdict.next_token) == (2, 4, 9)
    assert verdict.kept([1, 2, 7]) == [1, 4]
    # The only branch, at position 1, has the first branch row (4).
    assert greedy_verdict(drafts, logits[:5], 1.0, [(1, 4)]) == Verdict(2, 3, 4)
    # Lenient (tau < 1): a branch the target finds likely enough is kept though not its first choice.
    lenient = logits.clone()
    lenient[1, 6] = 4.9
    assert greedy_verdict(drafts, lenient, 0.5, [(0, 0), (1, 6)]).kept([1, 2, 7]) == [1, 6]
    assert greedy_verdict(drafts, lenient, 1.0, [(0, 0), (1, 6)]).kept([1, 2, 7]) == [1]
    # A branch the target does not want changes nothing.
    assert greedy_verdict(drafts, logits, 1.0, [(0, 6), (1, 5)]) == greedy_verdict(drafts, logits[:4], 1.0)
    # No branch at the rejected position: the target's own token, whatever the others say.
    assert greedy_verdict(drafts, logits[:6], 1.0, [(0, 1), (2, 4)]).next_token == 4


def forced_branches(engine: Engine) -> ModelDrafter:
    """A drafter that offers a branch at every position (the policy would weigh their cost)."""
    policy = DraftPolicy(engine.decoder.verify_cost)
    policy.plan = lambda k, branching=False: (k, k if branching else 0)  # type: ignore[method-assign]
    policy.place_branches = lambda confidences: list(range(len(confidences)))  # type: ignore[method-assign]
    return ModelDrafter(engine.draft, engine.vocab_size, policy=policy, branching=True)


@needs_kernels
@pytest.mark.parametrize("arch", LEAN_ARCHS)
def test_greedy_speculation_with_branches_is_token_identical_to_target_only(arch: str):
    engine = tiny_engine(arch, precision="int8", noise=0.3, eos_ids=frozenset())
    params = DecodeParams(k=4, max_new_tokens=60, adaptive_k=False)
    events = list(engine.decoder.generate(PROMPT, params, forced_branches(engine)))
    finished, target_only = events[-1], list(engine.decoder.generate(PROMPT, params, None))[-1]
    assert isinstance(finished, FinishedEvent) and isinstance(target_only, FinishedEvent)
    assert finished.token_ids == target_only.token_ids
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert any(e.record.branch_kept for e in steps)  # the branches were used, not just offered
    assert all(e.record.branches == e.record.drafted for e in steps if e.record.drafted)
    # A kept branch is counted as an accepted draft token and labelled as the draft's.
    kept = next(e for e in steps if e.record.branch_kept)
    assert kept.tokens[kept.record.accepted - 1].origin == "draft"
    assert kept.rejected is not None and kept.rejected.id != kept.tokens[kept.record.accepted - 1].id


@needs_kernels
def test_sampled_drafts_offer_no_branches():
    engine = tiny_engine("qwen2", precision="int8", noise=0.3, eos_ids=frozenset())
    drafter = forced_branches(engine)
    sampled = drafter.propose(PROMPT, 4, Sampler(0.8, 1.0, torch.Generator().manual_seed(0)))
    greedy = drafter.propose(PROMPT, 4, Sampler(0.0, 1.0, torch.Generator()))
    assert sampled.branches == [] and [i for i, _ in greedy.branches] == [0, 1, 2, 3]
    assert all(b != t for (_, b), t in zip(greedy.branches, greedy.tokens, strict=True))


def test_branches_pay_where_extra_rows_are_cheap_and_not_where_they_are_dear():
    flat_to_five = lambda rows: 1.0 if rows <= 5 else 1.0 + 0.15 * (rows - 5)
    dear = lambda rows: 1.0 + 0.3 * rows
    # A prose-like draft (half its tokens kept, its runner-up often right) drafts less and branches.
    assert best_plan(0.5, 0.45, 0.25, flat_to_five, 4) == (2, 2)
    assert best_plan(0.5, 0.45, 0.25, dear, 4)[1] == 0
    # A code-like draft drafts deep; branches would push the pass past the flat part.
    assert best_plan(0.9, 0.75, 0.25, flat_to_five, 4) == (4, 0)
    assert branch_gain(0.6, 0.4, 2) == pytest.approx(0.4 * (0.4 + 0.6 * 0.4))


def test_the_policy_offers_branches_only_when_asked_and_once_it_knows_the_draft_cost():
    policy = DraftPolicy(VerifyCost())
    assert policy.plan(4, branching=True) == (4, 0)  # nothing measured yet
    policy.draft_cost, policy.kept, policy.rejected = 0.25, 1.0, 1.0
    policy.verify_cost.measured = {1: 1.0, 5: 1.0, 9: 1.6}
    assert policy.plan(4, branching=True) == (2, 2)
    assert policy.plan(4) == (policy.choose(4), 0)


def test_the_policy_learns_how_often_branches_are_kept_and_the_chain_acceptance_without_them():
    policy = DraftPolicy(VerifyCost(), prior_weight=0.0001)
    every = [0, 1, 2, 3]
    policy.observe(StepRecord(drafted=4, accepted=3, emitted=4, draft_s=0.04, verify_s=0.1, branches=4,
                              branch_kept=True), branched=every)
    policy.observe(StepRecord(drafted=4, accepted=1, emitted=2, draft_s=0.04, verify_s=0.1, branches=4),
                   branched=every)
    assert policy.branch_hit == pytest.approx(0.9 / 1.9, rel=1e-3)  # kept, then missed (decayed)
    # The chain kept 2 of 4 then 1 of 4: the kept branch is not the chain's.
    assert policy.alpha == pytest.approx((0.9 * 2 + 1) / (0.9 * 2 + 1 + 0.9 + 1), rel=1e-3)
    # A rejection where no branch stood says nothing about branches, one where a branch stood does.
    policy.observe(StepRecord(drafted=4, accepted=3, emitted=4, draft_s=0.04, verify_s=0.1, branches=2),
                   branched=[0, 2])
    assert policy.branch_hit == pytest.approx(0.9 / 1.9, rel=1e-3)
    policy.observe(StepRecord(drafted=4, accepted=3, emitted=4, draft_s=0.04, verify_s=0.1, branches=1),
                   branched=[3])
    assert policy.branch_hit == pytest.approx(0.81 / 2.71, rel=1e-3)


def test_a_truncated_draft_keeps_the_branches_of_the_tokens_it_keeps():
    draft = Draft([1, 2, 3], source="model", branches=[(0, 4), (2, 5)])
    assert draft.truncated(2).branches == [(0, 4)]
    assert draft.truncated(3) is draft
