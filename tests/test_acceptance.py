"""The acceptance rule on hand-made distributions, and its lossless property checked exactly."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_tui.engine.acceptance import (
    acceptance_probability,
    first_argmax,
    greedy_verdict,
    leading_true,
    residual_distribution,
    sampled_verdict,
    sampling_probs,
)


def speculative_output_distribution(p: torch.Tensor, q: torch.Tensor, tau: float) -> torch.Tensor:
    """Exact law of the token emitted at one position when x ~ q is proposed and judged by the rule."""
    kept = q * acceptance_probability(p, q, tau)
    return kept + (1.0 - kept.sum()) * residual_distribution(p, q, tau)


def distributions(size: int) -> st.SearchStrategy[torch.Tensor]:
    weights = st.lists(st.floats(0.0, 1.0), min_size=size, max_size=size).filter(lambda w: sum(w) > 1e-3)
    return weights.map(lambda w: torch.tensor(w, dtype=torch.float64) / sum(w))


pairs = st.integers(2, 6).flatmap(lambda n: st.tuples(distributions(n), distributions(n)))


@given(pairs)
@settings(max_examples=300, deadline=None)
def test_tau_one_emits_exactly_the_target_distribution(pq):
    p, q = pq
    assert torch.allclose(speculative_output_distribution(p, q, 1.0), p, atol=1e-9)


@given(pairs, st.floats(0.05, 1.0))
@settings(max_examples=300, deadline=None)
def test_emitted_distribution_is_a_distribution_for_any_tau(pq, tau):
    p, q = pq
    out = speculative_output_distribution(p, q, tau)
    assert (out >= -1e-12).all()
    assert out.sum().item() == pytest.approx(1.0, abs=1e-9)


@given(pairs, st.floats(0.05, 1.0), st.floats(0.05, 1.0))
@settings(max_examples=300, deadline=None)
def test_lower_tau_never_accepts_less(pq, tau_a, tau_b):
    p, q = pq
    low, high = sorted((tau_a, tau_b))
    assert (acceptance_probability(p, q, low) >= acceptance_probability(p, q, high) - 1e-12).all()


def test_residual_without_mass_falls_back_to_target():
    p = torch.tensor([0.2, 0.3, 0.5])
    assert torch.equal(residual_distribution(p, p.clone(), 1.0), p)
    # tau * q above p everywhere: still no mass left.
    assert torch.equal(residual_distribution(p, torch.tensor([0.4, 0.4, 0.6]), 1.0), p)


def test_residual_keeps_only_where_target_exceeds_scaled_draft():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.1, 0.6, 0.3])
    assert torch.allclose(residual_distribution(p, q, 1.0), torch.tensor([1.0, 0.0, 0.0]))
    assert torch.allclose(residual_distribution(p, q, 0.5), torch.tensor([0.45, 0.0, 0.05]) / 0.5)


def test_acceptance_probability_caps_at_one_and_handles_zero_draft_mass():
    p = torch.tensor([0.5, 0.1, 0.0, 0.4])
    q = torch.tensor([0.25, 0.2, 0.0, 0.0])
    assert acceptance_probability(p, q, 1.0).tolist() == pytest.approx([1.0, 0.5, 0.0, 1.0])
    assert acceptance_probability(p, q, 0.5).tolist() == pytest.approx([1.0, 1.0, 0.0, 1.0])


def test_leading_true_counts_only_the_prefix():
    assert leading_true(torch.tensor([True, True, False, True])) == 2
    assert leading_true(torch.tensor([False, True])) == 0
    assert leading_true(torch.tensor([], dtype=torch.bool)) == 0


def logits_with_argmax(rows: list[int], vocab: int = 6) -> torch.Tensor:
    logits = torch.zeros(len(rows), vocab)
    for i, best in enumerate(rows):
        logits[i, best] = 5.0
    return logits


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 4), width=st.sampled_from([1, 5, 127, 128, 129, 300, 1000]), seed=st.integers(0, 10_000),
       ties=st.booleans())
def test_first_argmax_is_argmax_with_its_first_maximum(rows, width, seed, ties):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, width, generator=generator)
    if ties:  # whole numbers: the maximum recurs across chunks
        logits = logits.mul(2).round()
    assert torch.equal(first_argmax(logits), logits.argmax(dim=-1))
    assert torch.equal(first_argmax(logits[0]), logits[0].argmax())


def test_first_argmax_takes_the_first_of_equal_maxima_nan_first_and_index_0_of_a_row_without_any():
    logits = torch.zeros(4, 300)
    logits[0, [260, 7, 130]] = 5.0
    logits[1, 250] = 9.0
    logits[1, 200] = float("nan")
    logits[2] = float("-inf")
    logits[3, 299] = 1.0
    assert first_argmax(logits).tolist() == [7, 200, 0, 299] == logits.argmax(dim=-1).tolist()


def test_greedy_accepts_the_agreeing_prefix_then_corrects():
    logits = logits_with_argmax([1, 2, 3, 4])
    verdict = greedy_verdict(torch.tensor([1, 2, 0]), logits, 1.0)
    assert (verdict.accepted, verdict.next_token) == (2, 3)


def test_greedy_all_accepted_emits_the_bonus_token():
    verdict = greedy_verdict(torch.tensor([1, 2, 3]), logits_with_argmax([1, 2, 3, 4]), 1.0)
    assert (verdict.accepted, verdict.next_token) == (3, 4)


def test_greedy_with_no_drafts_is_plain_argmax():
    verdict = greedy_verdict(torch.tensor([], dtype=torch.long), logits_with_argmax([5]), 1.0)
    assert (verdict.accepted, verdict.next_token) == (0, 5)


def test_greedy_tau_one_rejects_a_tie_that_argmax_would_not_pick():
    logits = torch.tensor([[1.0, 3.0, 3.0], [0.0, 0.0, 1.0]])
    # Target-only greedy picks the first maximal index (1); token 2 ties but is not what it emits.
    assert greedy_verdict(torch.tensor([2]), logits, 1.0).accepted == 0
    assert greedy_verdict(torch.tensor([1]), logits, 1.0).accepted == 1


def test_lenient_greedy_accepts_tokens_within_tau_of_the_best():
    # p(x) / max p = exp(l_x - l_max)
    logits = torch.tensor([[0.0, math.log(0.6), 0.0 - 5], [0.0, 0.0, 1.0]])
    drafts = torch.tensor([1])
    assert greedy_verdict(drafts, logits, 1.0).accepted == 0
    assert greedy_verdict(drafts, logits, 0.7).accepted == 0
    assert greedy_verdict(drafts, logits, 0.5).accepted == 1
    assert greedy_verdict(drafts, logits, 0.5).next_token == 2


def test_sampling_probs_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = sampling_probs(logits, 1.0, top_p=0.8)
    assert probs.tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0])
    assert sampling_probs(logits, 1.0, top_p=0.1).tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0])


def test_sampling_probs_temperature_sharpens():
    logits = torch.tensor([1.0, 2.0])
    assert sampling_probs(logits, 0.5)[1] > sampling_probs(logits, 1.0)[1] > sampling_probs(logits, 2.0)[1]


def test_sampled_verdict_never_accepts_a_token_the_target_excludes():
    target = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    draft = torch.tensor([[1.0, 0.0, 0.0]])
    for seed in range(20):
        verdict = sampled_verdict(torch.tensor([0]), draft, target, 1.0, torch.Generator().manual_seed(seed))
        assert (verdict.accepted, verdict.next_token) == (0, 1)


def test_sampled_verdict_with_deterministic_draft_accepts_with_target_probability():
    target = torch.tensor([[0.3, 0.7], [1.0, 0.0]])
    generator = torch.Generator().manual_seed(0)
    accepted = sum(
        sampled_verdict(torch.tensor([1]), None, target, 1.0, generator).accepted for _ in range(4000)
    )
    assert accepted / 4000 == pytest.approx(0.7, abs=0.03)


def test_sampled_verdict_matches_target_distribution_statistically():
    """Monte Carlo twin of the exact property: 20k verdicts, tolerance 0.015 per token."""
    generator = torch.Generator().manual_seed(1234)
    p = torch.tensor([0.1, 0.4, 0.3, 0.2])
    q = torch.tensor([0.4, 0.1, 0.2, 0.3])
    counts = torch.zeros(4)
    for _ in range(20000):
        x = torch.multinomial(q, 1, generator=generator)
        verdict = sampled_verdict(x, q[None], torch.stack([p, p]), 1.0, generator)
        counts[x.item() if verdict.accepted else verdict.next_token] += 1
    assert torch.allclose(counts / counts.sum(), p, atol=0.015)


def test_a_two_token_block_emits_the_target_law_at_each_position():
    """Monte Carlo over whole blocks: drafts from q1, q2; target laws p1, p2 far apart per position.

    The first two emitted tokens must follow p1 x p2 (p2 is the same after every first token here),
    whether both drafts are kept, the second is corrected, or the first is (then the next step
    samples p2 itself). Tolerance 0.015 per cell, about 4 standard deviations at 20k blocks.
    """
    generator = torch.Generator().manual_seed(7)
    p1, q1 = torch.tensor([0.1, 0.6, 0.1, 0.2]), torch.tensor([0.4, 0.2, 0.3, 0.1])
    p2, q2 = torch.tensor([0.7, 0.05, 0.05, 0.2]), torch.tensor([0.1, 0.5, 0.3, 0.1])
    target = torch.stack([p1, p2, torch.full((4,), 0.25)])
    counts = torch.zeros(4, 4)
    blocks = 20000
    for _ in range(blocks):
        drafts = torch.cat([torch.multinomial(q1, 1, generator=generator), torch.multinomial(q2, 1, generator=generator)])
        verdict = sampled_verdict(drafts, torch.stack([q1, q2]), target, 1.0, generator)
        emitted = [*drafts[: verdict.accepted].tolist(), verdict.next_token]
        if len(emitted) == 1:
            emitted.append(int(torch.multinomial(p2, 1, generator=generator)))
        counts[emitted[0], emitted[1]] += 1
    assert torch.allclose(counts / blocks, torch.outer(p1, p2), atol=0.015)


def test_acceptance_probability_survives_a_draft_mass_that_underflows_when_scaled():
    p = torch.tensor([1.0, 0.0], dtype=torch.float64)
    q = torch.tensor([1.0, 5e-324], dtype=torch.float64)  # 0.5 * 5e-324 rounds to 0
    assert acceptance_probability(p, q, 0.5).tolist() == [1.0, 0.0]
