"""Streaming detokenization and run summaries."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import tiny_tokenizer

from specdec_tui.engine.detokenizer import IncrementalDetokenizer
from specdec_tui.engine.metrics import StepRecord, position_acceptance, summarize


@given(st.text(alphabet=st.sampled_from(list("ab c\n_(){}ü✓漢字é😀")), max_size=40))
@settings(max_examples=150, deadline=None)
def test_streamed_pieces_concatenate_to_the_decoded_text(text: str):
    tokenizer = tiny_tokenizer()
    ids = tokenizer.encode(text)
    stream = IncrementalDetokenizer(tokenizer)
    pieces = [stream.push(t) for t in ids]
    assert "".join(pieces) == tokenizer.decode(ids)
    assert not any("\ufffd" in piece for piece in pieces)


def test_special_tokens_stream_as_nothing():
    tokenizer = tiny_tokenizer()
    stream = IncrementalDetokenizer(tokenizer)
    assert stream.push(tokenizer.eos_token_id) == ""
    assert stream.push(tokenizer.encode("x")[0]) == "x"


def records() -> list[StepRecord]:
    return [
        StepRecord(drafted=4, accepted=4, emitted=5, draft_s=0.04, verify_s=0.1),
        StepRecord(drafted=4, accepted=1, emitted=2, draft_s=0.04, verify_s=0.1),
        StepRecord(drafted=2, accepted=0, emitted=1, draft_s=0.02, verify_s=0.1),
    ]


def test_position_acceptance_counts_each_draft_slot():
    assert position_acceptance(records()) == (2 / 3, 1 / 3, 1 / 2, 1 / 2)


def test_summary_rates():
    summary = summarize(records(), mode="model", prompt_tokens=10, seconds=0.5, ttft_s=0.2, finish_reason="eos")
    assert summary.new_tokens == 8
    assert summary.acceptance_rate == pytest.approx(5 / 10)
    assert summary.mean_accepted == pytest.approx(5 / 3)
    assert summary.tokens_per_s == pytest.approx(16.0)
    assert summary.mean_draft_ms == pytest.approx(100 / 3)
    assert summary.mean_verify_ms == pytest.approx(100.0)


def test_the_per_step_means_leave_out_the_prompts_pass_but_the_steps_count_it():
    prompt = StepRecord(drafted=0, accepted=0, emitted=1, draft_s=0.0, verify_s=0.9, prompt=True)
    summary = summarize([prompt, *records()], mode="model", prompt_tokens=10, seconds=1.4, ttft_s=0.9,
                        finish_reason="eos")
    assert summary.mean_verify_ms == pytest.approx(100.0) and summary.mean_draft_ms == pytest.approx(100 / 3)
    assert summary.steps == 4 and summary.new_tokens == 9


def test_target_only_has_no_acceptance_rate():
    summary = summarize([StepRecord(0, 0, 1, 0.0, 0.1)], mode="target", prompt_tokens=3, seconds=0.1,
                        ttft_s=0.1, finish_reason="length")
    assert summary.acceptance_rate is None
    assert summary.position_acceptance == ()
