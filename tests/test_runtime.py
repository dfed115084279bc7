"""The composition layer: settings reach the engine, messages reach the prompt, one mode registry."""

from __future__ import annotations

from tiny import tiny_pair

from specdec_tui.config import load_settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.engine.drafters import HybridDrafter, ModelDrafter
from specdec_tui.engine.modes import DRAFTER_MODES, MODES
from specdec_tui.models.loader import ModelPair
from specdec_tui.runtime import Runtime, decode_params, reply_summary


def settings(**decoding: object):  # type: ignore[no-untyped-def]
    base, _ = load_settings()
    return base.model_copy(update={"decoding": base.decoding.model_copy(update=decoding)})


def test_every_decoding_setting_reaches_the_decode_params():
    params = decode_params(settings(k=7, tau=0.6, temperature=0.3, top_p=0.9, max_new_tokens=33, seed=5,
                                    adaptive_k=False, draft_min_confidence=0.25).decoding)
    assert (params.k, params.tau, params.temperature, params.top_p) == (7, 0.6, 0.3, 0.9)
    assert (params.max_new_tokens, params.seed, params.adaptive_k, params.draft_min_confidence) == (33, 5, False, 0.25)
    assert decode_params(settings().decoding, k=2, tau=0.5).k == 2


def test_adaptive_k_and_draft_confidence_are_chosen_per_reply():
    runtime = Runtime.from_pair(settings(), tiny_pair())
    fixed = runtime.engine.drafter("model", runtime.params(adaptive_k=False, draft_min_confidence=0.4))
    assert isinstance(fixed, ModelDrafter) and fixed.policy is None and fixed.min_confidence == 0.4
    adaptive = runtime.engine.drafter("model", runtime.params())
    assert isinstance(adaptive, ModelDrafter) and adaptive.policy is runtime.engine.policies["model"]
    hybrid = runtime.engine.drafter("hybrid", runtime.params())
    assert isinstance(hybrid, HybridDrafter) and hybrid.model.policy is adaptive.policy  # one estimate per drafter


def test_the_mode_registry_is_what_settings_accept_and_the_engine_runs():
    assert set(DRAFTER_MODES) == set(MODES) - {"target"}
    runtime = Runtime.from_pair(settings(), tiny_pair())
    assert runtime.modes == tuple(MODES)
    alone = Runtime.from_pair(settings(drafter="hybrid"), ModelPair(tiny_pair().target, None))
    assert alone.modes == ("prompt-lookup", "target")
    assert alone.default_mode == "target"  # hybrid needs a draft model


def test_a_reply_to_messages_uses_the_chat_template_and_its_summary_is_storable():
    runtime = Runtime.from_pair(settings(), tiny_pair())
    messages = [{"role": "user", "content": "def add(a, b):"}]
    ids = runtime.prompt_ids(messages)
    assert runtime.pair.target.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    params = runtime.params(k=3, max_new_tokens=10)
    finished = list(runtime.reply(messages, params, "hybrid"))[-1]
    assert isinstance(finished, FinishedEvent)
    assert runtime.engine.target.ids[: len(ids)] == ids
    summary = reply_summary(finished.summary, params)
    assert summary["mode"] == "hybrid" and summary["k"] == 3 and summary["new_tokens"] == len(finished.token_ids)
    resets = []
    runtime.engine.reset = lambda: resets.append(1)  # type: ignore[method-assign]
    list(runtime.reply(messages, params, "target"))
    assert resets == []  # a follow-up keeps the caches
    list(runtime.reply(messages, params, "target", fresh=True))
    assert resets == [1]
