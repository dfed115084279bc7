"""A draft's head limited to the leading ids and those of its context (models/draft_head.py)."""

from __future__ import annotations

import pytest
import torch
from tiny import perturbed, runner_for, tiny_model, tiny_tokenizer

from specdec_tui.engine.decoder import DecodeParams, FinishedEvent
from specdec_tui.engine.session import Engine
from specdec_tui.models import quantized_kernels
from specdec_tui.models.fast_llama import FastLlama

PROMPT = tiny_tokenizer().encode("def add(a, b):\n    return a + b\n\ndef add(a, b):")
LEADING, ALWAYS = 200, 250
# An id past the leading ones in no 16-id block (the largest a head reads at once) of the prompt's or 250.
CONTEXT_ID = next(t for t in range(LEADING, len(tiny_tokenizer()))
                  if t // 16 not in {u // 16 for u in [*PROMPT, ALWAYS]})


def draft_runner(precision: str) -> FastLlama:
    if precision != "fp32" and not quantized_kernels.available():
        pytest.skip("the package's kernels do not build here")
    return FastLlama.from_model(perturbed(tiny_model("qwen2"), 0.02, seed=1), precision, exact=False)


def finite_ids(logits: torch.Tensor) -> set[int]:
    return set(torch.nonzero(torch.isfinite(logits)).flatten().tolist())


@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_a_limited_head_gives_the_leading_ids_the_always_ids_and_the_contexts_ids_their_whole_head_logits(
        precision: str):
    runner = draft_runner(precision)
    ids = [*PROMPT, CONTEXT_ID]
    whole = runner.forward(ids, 2)
    runner.reset()
    runner.limit_head(LEADING, always=(ALWAYS,))
    limited = runner.forward(ids, 2)
    assert runner.context_head is not None
    per_block = runner.context_head.per_block or 1
    kept = set(range(LEADING)) | {ALWAYS} | {t for t in ids if t >= LEADING}
    for row in range(2):
        # Each kept id has the whole head's logit (bit for bit from the package's kernels); the others
        # are -inf but for the kept ids' block neighbours, which come with the block.
        if precision == "fp32":  # a BLAS product of fewer rows may round differently
            assert torch.allclose(limited[row, sorted(kept)], whole[row, sorted(kept)], atol=1e-5)
        else:
            assert torch.equal(limited[row, sorted(kept)], whole[row, sorted(kept)])
        assert kept <= finite_ids(limited[row])
        assert {t // per_block for t in finite_ids(limited[row])} == {t // per_block for t in kept}
    # A new reply forgets the last one's ids.
    runner.reset()
    after_reset = runner.forward(PROMPT, 1)[0]
    assert torch.isinf(after_reset[CONTEXT_ID]) and torch.isfinite(after_reset[ALWAYS])


def test_a_limited_head_keeps_an_id_fed_as_a_branch():
    runner = draft_runner("int4")
    if not runner.supports_branches:
        pytest.skip("branches need the kernel layers")
    runner.limit_head(LEADING)
    runner.forward(PROMPT[:-3], 1)
    logits = runner.forward(PROMPT[-3:], 3, branches=[(0, CONTEXT_ID)])
    assert torch.isfinite(logits[:, CONTEXT_ID]).all()


def test_a_draft_with_a_limited_head_still_gives_the_targets_reply():
    target = tiny_model("qwen2")
    draft = FastLlama.from_model(perturbed(target, 0.02, seed=1), "fp32", exact=False)
    draft.limit_head(LEADING, always=(tiny_tokenizer().eos_token_id,))
    engine = Engine(runner_for(target, "fp32"), tiny_tokenizer(), draft=draft, eos_ids=frozenset(),
                    max_context=256, vocab_size=target.config.vocab_size)

    def reply(mode: str) -> tuple[int, ...]:
        params = DecodeParams(max_new_tokens=40, k=4, adaptive_k=False)
        finished = list(engine.generate(PROMPT, params, mode))[-1]
        assert isinstance(finished, FinishedEvent)
        return finished.token_ids

    assert reply("model") == reply("target")
