"""The draft-length policy: expected tokens per step and the K that maximises tokens per second."""

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_tui.engine.drafters import Draft, HybridDrafter, ModelDrafter, PromptLookupDrafter, Sampler
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import AcceptanceByConfidence, DraftPolicy, VerifyCost, best_k, expected_tokens


@given(st.floats(0.0, 0.999), st.integers(0, 16))
@settings(max_examples=300, deadline=None)
def test_expected_tokens_is_between_one_and_k_plus_one_and_grows_with_k(alpha, k):
    e = expected_tokens(alpha, k)
    assert 1.0 <= e <= k + 1 + 1e-9
    assert expected_tokens(alpha, k + 1) >= e - 1e-12


def test_expected_tokens_matches_a_direct_sum():
    alpha, k = 0.8, 4
    direct = sum(alpha**i for i in range(k + 1))  # the bonus/correction plus each kept prefix
    assert expected_tokens(alpha, k) == pytest.approx(direct)
    assert expected_tokens(1.0, 4) == 5.0


def flat(cost: float):  # type: ignore[no-untyped-def]
    return lambda rows: cost


def test_a_useless_draft_means_no_drafting():
    assert best_k(0.0, draft_cost=0.01, verify_cost=flat(0.1), k_max=8) == 0


def test_a_perfect_free_draft_drafts_the_most():
    assert best_k(1.0, draft_cost=0.0, verify_cost=flat(0.1), k_max=8) == 8


@given(st.floats(0.05, 0.99), st.floats(0.001, 0.1), st.floats(0.0, 0.05))
@settings(max_examples=200, deadline=None)
def test_the_chosen_k_is_never_slower_than_plain_target_steps(alpha, draft_cost, slope):
    verify = lambda rows: 0.1 + slope * (rows - 1)
    k = best_k(alpha, draft_cost, verify, 8)
    assert expected_tokens(alpha, k) / (k * draft_cost + verify(k + 1)) >= 1 / verify(1) - 1e-12


def step(drafted: int, accepted: int, draft_s: float = 0.04, verify_s: float = 0.1) -> StepRecord:
    return StepRecord(drafted=drafted, accepted=accepted, emitted=accepted + 1, draft_s=draft_s, verify_s=verify_s)


def taught(policy: DraftPolicy, record: StepRecord) -> None:
    """What the decoder does after a step that verified ``policy``'s draft."""
    policy.verify_cost.observe(record)
    policy.observe(record)


def test_the_policy_backs_off_when_drafts_keep_being_rejected_and_probes_again():
    policy = DraftPolicy(VerifyCost(), probe_every=4)
    for _ in range(10):
        taught(policy, step(4, 0, draft_s=0.2))
        policy.verify_cost.observe(step(0, 0, verify_s=0.1))  # a plain target step
    choices = [policy.choose(4) for _ in range(8)]
    assert choices.count(0) >= 6 and 1 in choices  # mostly target-only, with a one-token probe


def test_the_policy_drafts_deep_when_drafts_are_cheap_and_kept():
    policy = DraftPolicy(VerifyCost())
    for rows in (1, 5):
        taught(policy, step(rows - 1, rows - 1, draft_s=0.01 * (rows - 1), verify_s=0.1 + 0.005 * rows))
    for _ in range(10):
        taught(policy, step(4, 4, draft_s=0.04))
    assert policy.alpha > 0.9
    assert policy.choose(6) == 6


def test_verify_costs_are_measured_per_row_count_and_extrapolated_between():
    cost = VerifyCost()
    assert cost(5) == 1.0  # nothing measured: drafting looks free next to it, so the first step drafts
    cost.observe(step(6, 0, verify_s=0.3))
    assert cost(7) == pytest.approx(0.3)
    assert cost(9) == pytest.approx(0.3 + 2 * 0.03)  # one measurement: the prior slope, 10% a row
    assert cost(1) == cost(3) == pytest.approx(0.3)  # fewer rows than measured: what those cost
    cost.observe(step(0, 0, verify_s=0.25))
    assert cost(4) == pytest.approx(0.25 + 3 * (0.3 - 0.25) / 6)  # on the line through both
    cost.observe(step(6, 0, verify_s=0.4))
    assert 0.3 < cost(7) < 0.4  # repeated measurements are averaged, recent ones weigh more


def test_a_pass_over_fewer_rows_is_never_thought_dearer_than_one_measured_over_more():
    cost = VerifyCost()
    cost.measured = {3: 0.66, 5: 0.5}  # 3 rows measured in a slow moment
    assert cost(3) == pytest.approx(0.5) and cost(5) == pytest.approx(0.5)
    assert cost(2) == pytest.approx(0.5)  # on the line, capped by the 5-row measurement
    cost.observe(step(0, 0, verify_s=0.4))
    assert cost(2) == pytest.approx(0.4 + (0.5 - 0.4) / 4)


def test_after_a_replys_first_pass_a_plain_steps_pass_is_learnt_at_its_cost():
    # The first step drafts the most before anything is known: 9 rows. A plain step's pass then
    # costs 0.6 of that one (reading the weights is most of both). Continuing the line below 9 rows
    # guessed a fifth, and clipping to a guess held the plain steps' cost there for many passes.
    cost = VerifyCost()
    cost.observe(step(8, 0, verify_s=0.1))
    assert cost(1) == pytest.approx(0.1)  # fewer rows than measured: no cheaper than the fewest
    cost.observe(step(0, 0, verify_s=0.06))
    assert cost(1) == pytest.approx(0.06)  # a first pass cheaper than the guess is believed
    cost.observe(step(0, 0, verify_s=0.03))
    assert cost(1) == pytest.approx(0.7 * 0.06 + 0.3 * 0.06 / 1.25)  # later ones are clipped


def test_verify_costs_measured_far_from_the_current_context_are_forgotten():
    # Every row attends to the whole context: a chat's early costs say nothing about a pass 8,000
    # positions on, and a cheap 9-row figure would cap every row count below it.
    cost = VerifyCost(forget_after=512)
    cost.observe(step(8, 0, verify_s=0.056), context=100)
    cost.observe(step(2, 0, verify_s=0.040), context=300)
    cost.observe(step(4, 0, verify_s=0.045), context=600)  # 500 positions from the first: kept
    assert set(cost.measured) == {3, 5, 9}
    cost.observe(step(2, 0, verify_s=0.078), context=8000)
    assert cost.measured == {3: pytest.approx(0.078)}  # believed, not clipped to the old guesses
    assert cost(3) == pytest.approx(0.078)  # no longer capped by the old 9-row pass
    assert cost(9) == pytest.approx(0.078 * (1 + 0.1 * 6))  # one measurement: the prior slope
    cost.observe(step(2, 0, verify_s=0.030), context=200)  # a new, short chat forgets the long one's
    assert cost.measured == {3: pytest.approx(0.030)}


def test_a_step_in_the_verify_curve_is_charged_over_the_rows_around_it_not_to_one_row():
    # Five rows a pass over the weights: 1-5 rows cost one pass, 6-10 two.
    cost = VerifyCost()
    cost.measured = {rows: 0.05 if rows <= 5 else 0.08 for rows in range(1, 11)}
    assert cost.extra_row(2) == pytest.approx(0.0)  # well inside a pass, another row is free
    assert cost.extra_row(4) == pytest.approx(0.01)  # a third of the step, from the rows around it
    assert cost.extra_row(5) == pytest.approx(0.01)  # not the whole step to the sixth row
    assert cost.extra_row(7) == pytest.approx(0.0)


def test_a_pass_slowed_by_something_else_moves_its_row_counts_cost_by_at_most_a_quarter():
    cost = VerifyCost()
    cost.observe(step(0, 0, verify_s=0.1))
    cost.observe(step(4, 0, verify_s=0.14))
    assert cost(6) == pytest.approx(0.15)
    cost.observe(step(5, 0, verify_s=0.375))  # first seen, at two and a half times that
    assert cost(6) == pytest.approx(0.15 * 1.25)
    for _ in range(30):  # a row count that really is dearer gets there, a quarter at a time
        cost.observe(step(5, 0, verify_s=0.375))
    assert cost(6) == pytest.approx(0.375, rel=0.01)


def test_a_draft_that_read_a_whole_prompt_does_not_inflate_the_draft_cost():
    policy = DraftPolicy(VerifyCost())
    policy.observe(step(4, 4, draft_s=0.04))
    policy.observe(step(4, 4, draft_s=3.0), cost_is_typical=False)  # prompt prefill
    assert policy.draft_cost == pytest.approx(0.01)
    assert policy.alpha > 0.7  # acceptance still learnt from that step


def test_a_draft_slowed_by_something_else_moves_the_draft_cost_by_at_most_a_quarter():
    policy = DraftPolicy(VerifyCost())
    policy.observe(step(4, 4, draft_s=0.04))
    policy.observe(step(4, 4, draft_s=0.8))  # another process took the cores for this step
    assert policy.draft_cost == pytest.approx(0.7 * 0.01 + 0.3 * 0.0125)
    for _ in range(30):  # a draft that really is dearer gets there, a quarter at a time
        policy.observe(step(4, 4, draft_s=0.08))
    assert policy.draft_cost == pytest.approx(0.02, rel=0.01)


def test_a_policy_that_stopped_drafting_because_drafts_looked_dear_learns_from_its_probes_that_they_are_not():
    # Drafting was learnt at 8 times its cost in a slow moment, so the policy stopped drafting. Each
    # probe then comes after plain steps the draft did not read, so its time includes reading them
    # first (not a typical draft time): still under the estimate, it must bring the estimate down.
    policy = DraftPolicy(VerifyCost())
    for rows in (1, 2, 3, 4, 5):
        policy.verify_cost.observe(step(rows - 1, 0, verify_s=0.04 + 0.002 * rows))
    for _ in range(10):
        policy.observe(step(4, 4, draft_s=0.04))
    policy.draft_cost = 0.08
    drafted, unread = [], 0
    for _ in range(60):
        k = policy.choose(4)
        drafted.append(k)
        if k == 0:
            unread += 1
            continue
        policy.observe(step(k, k, draft_s=0.01 * k + 0.002 * unread), cost_is_typical=unread <= 2)
        unread = 0
    assert drafted[:6].count(0) >= 5  # stopped at first
    assert drafted[-20:].count(0) == 0  # drafting again
    assert policy.draft_cost < 0.015


GREEDY = Sampler(0.0, 1.0, torch.Generator().manual_seed(0))
REPEATING = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]  # the last 3-gram occurred before: a copy is found


def teach_copies(drafter: PromptLookupDrafter | HybridDrafter, cost: VerifyCost, records: list[StepRecord]) -> None:
    """What the decoder does after steps that verified copied drafts."""
    for record in records:
        cost.observe(record)
        drafter.observe(record, "prompt-lookup")


def teach_rejected_copies(drafter: PromptLookupDrafter | HybridDrafter, cost: VerifyCost) -> None:
    """13 steps whose copied drafts were all rejected, with verify costs rising per row."""
    records = [step(rows - 1, 0, draft_s=0.0, verify_s=0.08 + 0.02 * rows) for rows in (1, 2, 5)]
    teach_copies(drafter, cost, [*records, *[step(4, 0, draft_s=0.0001, verify_s=0.18)] * 10])


def test_a_lookup_whose_copies_keep_failing_stops_copying():
    cost = VerifyCost()
    drafter = PromptLookupDrafter(min_ngram=3, policy=DraftPolicy(cost))
    assert drafter.propose(REPEATING, 4, GREEDY).tokens == [8, 9, 10, 11]
    teach_rejected_copies(drafter, cost)
    assert drafter.propose(REPEATING, 4, GREEDY).tokens == []


def test_a_lookup_whose_copies_are_kept_copies_the_most():
    cost = VerifyCost()
    drafter = PromptLookupDrafter(min_ngram=3, policy=DraftPolicy(cost))
    teach_copies(drafter, cost, [step(4, 4, draft_s=0.0001, verify_s=0.12)] * 10)
    assert drafter.propose(REPEATING, 4, GREEDY).tokens == [8, 9, 10, 11]


def test_a_drafter_learns_acceptance_only_from_its_own_drafts():
    drafter = PromptLookupDrafter(policy=DraftPolicy(VerifyCost()))
    assert drafter.policy is not None
    before = drafter.policy.alpha
    drafter.observe(step(4, 0), "model")
    assert drafter.policy.alpha == before
    drafter.observe(step(4, 0), "prompt-lookup")
    assert drafter.policy.alpha < before


class FixedDrafter:
    name = "model"

    def propose(self, context, k, sampler):  # type: ignore[no-untyped-def]
        return Draft([1] * k, source=self.name)

    def observe(self, record: StepRecord, source: str) -> None:
        pass


def test_a_hybrid_hands_over_to_the_model_when_its_copies_fail():
    cost = VerifyCost()
    lookup, model = PromptLookupDrafter(min_ngram=3, policy=DraftPolicy(cost)), FixedDrafter()
    hybrid = HybridDrafter(lookup, model)  # type: ignore[arg-type]
    assert hybrid.propose(REPEATING, 4, GREEDY).source == "prompt-lookup"
    teach_rejected_copies(hybrid, cost)
    assert hybrid.propose(REPEATING, 4, GREEDY).source == "model"


def test_acceptance_by_confidence_starts_at_the_drafts_own_probability_and_learns_from_judged_tokens_only():
    table = AcceptanceByConfidence(bins=10)
    assert table(0.95) == pytest.approx(0.95)
    assert table(0.15) == pytest.approx(0.15)
    for _ in range(50):
        # The first token kept, the second rejected; the target never judged the two after it.
        table.observe([0.95, 0.15, 0.35, 0.55], kept=1)
    assert table(0.95) > 0.97
    assert table(0.15) < 0.05
    assert table(0.35) == pytest.approx(0.35)
    assert table(0.55) == pytest.approx(0.55)


def test_a_draft_goes_on_after_tokens_it_is_sure_of_and_stops_after_one_it_doubts():
    policy = DraftPolicy(VerifyCost())
    assert policy.keep_drafting([0.15], 0)  # no draft cost measured yet: draft up to K
    policy.verify_cost.observe(step(0, 0, verify_s=0.06))  # a plain step's pass
    taught(policy, step(4, 3, draft_s=0.04, verify_s=0.1))  # a drafted token costs a tenth of a pass
    assert policy.plan(4) == (2, 0)  # on the average acceptance, 2 tokens a step pay best
    assert policy.keep_drafting([0.97, 0.95], 0)
    assert not policy.keep_drafting([0.97, 0.15], 0)


class ScriptedDraftModel:
    """A draft model sure of token 1 with the given probability at each position after the prompt."""

    input_vocab = 8
    last_fed = 1

    def __init__(self, prompt: list[int], sure: list[float]) -> None:
        self.prompt, self.sure = prompt, sure

    def move_window(self, length: int) -> None:  # it reads every token it is given
        pass

    def logits_for(self, ids: list[int], n_logits: int) -> torch.Tensor:
        p = self.sure[len(ids) - len(self.prompt)]
        probs = torch.full((self.input_vocab,), (1 - p) / (self.input_vocab - 1))
        probs[1] = p
        return probs.log()[None]


def test_a_model_draft_stops_after_a_token_it_doubts_and_teaches_the_policy_its_confidences():
    prompt, sure = [0, 0, 0], [0.97, 0.95, 0.15, 0.97, 0.97, 0.97, 0.97]
    policy = DraftPolicy(VerifyCost())
    taught(policy, step(4, 3, draft_s=0.04, verify_s=0.1))
    drafter = ModelDrafter(ScriptedDraftModel(prompt, sure), 8, policy=policy)  # type: ignore[arg-type]
    assert drafter.propose(prompt, 6, GREEDY).tokens == [1, 1, 1]  # stopped after the doubted third
    assert drafter.confidences == pytest.approx(sure[:3])
    fixed_length = ModelDrafter(ScriptedDraftModel(prompt, sure), 8)  # type: ignore[arg-type]
    assert len(fixed_length.propose(prompt, 6, GREEDY).tokens) == 6  # no policy: always K
    before = policy.by_confidence(0.15)
    drafter.observe(step(3, 2), "model")  # the target rejected the doubted token
    assert policy.by_confidence(0.15) < before


def test_branches_go_where_the_draft_doubted_while_a_row_pays_for_itself():
    policy = DraftPolicy(VerifyCost())
    sure_then_doubted = [0.95, 0.97, 0.5, 0.3]
    assert policy.place_branches(sure_then_doubted) == []  # nothing measured yet
    policy.rate = 0.3
    # Rows free up to 6, then 0.5 s each, so a sixth row costs 0.17 s and a seventh 0.33 s (each
    # row's share of the three-row span around it). Expected tokens from a branch: 0.025 / 0.024 at
    # the sure positions, 0.20 where the chain first meets a doubted token, 0.16 after it.
    policy.verify_cost.measured = {1: 1.0, 6: 1.0, 7: 1.5, 8: 2.0}
    assert policy.place_branches(sure_then_doubted) == [2, 3]
    policy.rate = 1.0  # at a faster step's rate the seventh row no longer pays
    assert policy.place_branches(sure_then_doubted) == [2]
    policy.verify_cost.measured = {1: 1.0, 8: 3.1}
    assert policy.place_branches(sure_then_doubted) == []


def test_a_model_draft_branches_where_it_doubted_and_learns_how_often_such_branches_are_kept():
    prompt, sure = [0, 0, 0], [0.97, 0.95, 0.15, 0.97]
    policy = DraftPolicy(VerifyCost())
    taught(policy, step(4, 3, draft_s=0.04, verify_s=0.1))
    drafter = ModelDrafter(ScriptedDraftModel(prompt, sure), 8, policy=policy, branching=True)  # type: ignore[arg-type]
    draft = drafter.propose(prompt, 6, GREEDY)
    assert draft.tokens == [1, 1, 1]
    assert [i for i, _ in draft.branches] == [2] and draft.branches[0][1] != 1
    assert drafter.propose(prompt, 6, Sampler(0.5, 1.0, torch.Generator().manual_seed(0))).branches == []
    drafter.propose(prompt, 6, GREEDY)
    before = policy.branch_hit_by_confidence(0.15)
    kept_branch = StepRecord(drafted=3, accepted=3, emitted=4, draft_s=0.04, verify_s=0.1, branches=1,
                             branch_kept=True)
    drafter.observe(kept_branch, "model")
    assert policy.branch_hit_by_confidence(0.15) > before
    assert policy.branch_hit_by_confidence(0.95) == pytest.approx(0.5)  # the prior, where no branch stood


# The model drafts token 1; the context's last 3-gram is new, but after the draft's three 1s the
# context ends as it did at its start, where 7, 8, 9, 4 followed.
SEEN_BEFORE = [5, 1, 1, 1, 7, 8, 9, 4, 2, 0, 3]


def hybrid_with_copies(sure: list[float]) -> tuple[HybridDrafter, DraftPolicy, DraftPolicy]:
    """A hybrid whose model drafts three sure tokens and whose verify passes cost the same up to
    nine rows and twice as much from ten."""
    cost = VerifyCost()
    cost.measured = {1: 0.1, 9: 0.1, 10: 0.2}
    model_policy, copy_policy = DraftPolicy(cost), DraftPolicy(cost)
    model_policy.observe(step(3, 3, draft_s=0.03, verify_s=0.1))
    model = ModelDrafter(ScriptedDraftModel(SEEN_BEFORE, sure), 16, policy=model_policy)  # type: ignore[arg-type]
    lookup = PromptLookupDrafter(min_ngram=3, span=8)
    return HybridDrafter(lookup, model, copy_policy), model_policy, copy_policy


def test_a_copy_of_what_followed_the_drafts_last_tokens_goes_after_it_while_its_rows_pay():
    hybrid, _, copy_policy = hybrid_with_copies([0.97] * 8)
    draft = hybrid.propose(SEEN_BEFORE, 3, GREEDY)
    # Rows 5-8 cost nothing more; a ninth row's share of the step at ten, more than a copied token is worth.
    assert draft.tokens == [1, 1, 1, 7, 8, 9, 4] and draft.source == "model"
    for _ in range(10):  # copies rejected at once, over and over
        hybrid.observe(step(7, 3), "model")
    copy_policy.verify_cost.measured = {1: 0.1, 4: 0.1, 5: 0.12, 9: 0.2}  # and rows no longer free
    assert hybrid.propose(SEEN_BEFORE, 3, GREEDY).tokens == [1, 1, 1]
    without_policy = HybridDrafter(hybrid.lookup, hybrid.model)  # a fixed K: the draft alone
    assert without_policy.propose(SEEN_BEFORE, 3, GREEDY).tokens == [1, 1, 1]


@pytest.mark.parametrize(("sure", "copied"), [([0.97] * 3, [7, 8, 9]), ([0.97, 0.97, 0.3], [])])
def test_a_copy_after_a_draft_the_target_is_unlikely_to_keep_whole_is_shorter_or_none(sure, copied):
    hybrid, model_policy, _ = hybrid_with_copies(sure)
    model_policy.keep_drafting = lambda confidences, branches: True  # type: ignore[method-assign]
    model_policy.verify_cost.measured = {1: 0.1, 3: 0.1, 4: 0.11, 5: 0.12, 6: 0.13, 7: 0.14, 8: 0.15}  # 10 ms a row past 3
    assert hybrid.propose(SEEN_BEFORE, 3, GREEDY).tokens == [1, 1, 1, *copied]


def test_the_models_policy_learns_from_its_tokens_and_the_copys_policy_from_the_copy():
    hybrid, model_policy, copy_policy = hybrid_with_copies([0.97] * 8)
    hybrid.propose(SEEN_BEFORE, 3, GREEDY)
    alpha, copy_alpha = model_policy.alpha, copy_policy.alpha
    hybrid.observe(step(7, 1, draft_s=0.036), "model")  # rejected at the second drafted token
    assert model_policy.alpha < alpha and copy_policy.alpha == copy_alpha  # the copy was never judged
    assert model_policy.draft_cost == pytest.approx(0.7 * 0.01 + 0.3 * 0.012)  # 0.036 s for 3 drafted tokens
    hybrid.propose(SEEN_BEFORE, 3, GREEDY)
    alpha = model_policy.alpha
    hybrid.observe(step(7, 5), "model")  # the draft kept, and two of the four copied tokens
    assert model_policy.alpha > alpha and copy_policy.alpha < copy_alpha
    assert copy_policy.kept == pytest.approx(0.9 * 1.4 + 2) and copy_policy.rejected == pytest.approx(0.9 * 0.6 + 1)
    hybrid.propose(SEEN_BEFORE, 3, GREEDY)
    judged = copy_policy.kept + copy_policy.rejected
    # The last drafted token rejected and its branch kept: three tokens accepted, the copy never reached.
    hybrid.observe(replace(step(7, 3), branches=1, branch_kept=True), "model")
    assert copy_policy.kept + copy_policy.rejected == judged


def test_a_sampled_draft_proposes_its_copied_tokens_for_certain():
    hybrid, _, _ = hybrid_with_copies([0.97] * 8)
    draft = hybrid.propose(SEEN_BEFORE, 3, Sampler(1.0, 1.0, torch.Generator().manual_seed(0)))
    copied = len(draft.tokens) - 3
    assert copied > 0 and draft.probs is not None and draft.probs.shape == (3 + copied, 16)
    assert torch.equal(draft.probs[3:].argmax(-1), torch.tensor(draft.tokens[3:]))
    assert torch.equal(draft.probs[3:].sum(-1), torch.ones(copied))
