"""The real default pair (Qwen2.5-Coder 0.5B draft / 1.5B target). Run with ``-m real_models``.

The first run fetches the pair's GGUF files and packs them into the cache (a few minutes); later
runs map the packed entries.
"""

from __future__ import annotations

import pytest

from specdec_tui.chat.template import render_prompt
from specdec_tui.config import load_settings
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent
from specdec_tui.engine.session import Engine
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.embedding import GgufEmbedding
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.models.loader import ModelPair, load_pair
from specdec_tui.models.presets import DEFAULT_DRAFT, DEFAULT_TARGET
from specdec_tui.runtime import Runtime, build_engine
from specdec_tui.terminal_progress import TerminalProgress

pytestmark = pytest.mark.real_models

CODE_PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring."


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    settings, _ = load_settings()
    progress = TerminalProgress()
    loaded = load_pair(DEFAULT_TARGET, DEFAULT_DRAFT, precision=settings.models.precision,
                       draft_precision=settings.models.draft_precision, device="cpu",
                       cache_dir=settings.models.cache_dir, progress=progress,
                       draft_head_tokens=settings.models.draft_head_tokens, kv_cache=settings.models.kv_cache,
                       draft_kv_cache=settings.models.draft_kv_cache)
    progress.close()
    return loaded


@pytest.fixture(scope="module")
def engine(pair: ModelPair) -> Engine:
    assert pair.draft is not None
    return build_engine(pair, load_settings()[0])[0]


def reply(engine: Engine, pair: ModelPair, text: str, mode: str, **params: object) -> FinishedEvent:
    ids = render_prompt(pair.target.tokenizer, [{"role": "user", "content": text}])
    engine.reset()
    finished = list(engine.generate(ids, DecodeParams(**params), mode))[-1]
    assert isinstance(finished, FinishedEvent)
    return finished


def test_the_default_pair_is_cached_intact_and_shares_a_tokenizer(pair: ModelPair):
    cache = ModelCache(load_settings()[0].models.cache_dir)
    # A GGUF is removed once packed (and fetched again, verified, if something reads it).
    assert cache.check(DEFAULT_DRAFT) in (None, "not cached") and cache.check(DEFAULT_TARGET) in (None, "not cached")
    packed = [key for key in cache.entries() if key.startswith((f"{DEFAULT_TARGET}.", f"{DEFAULT_DRAFT}."))]
    assert len(packed) >= 2 and all(cache.check(key) is None for key in packed), packed
    # Each keeps its GGUF's quantized embedding table: packing checked its rows against transformers'.
    assert pair.draft is not None
    for model in (pair.target, pair.draft):
        assert isinstance(model.runner, FastLlama) and isinstance(model.runner.embedding, GgufEmbedding)
    assert pair.draft.tokenizer is pair.target.tokenizer
    assert pair.target.tokenizer.chat_template
    assert pair.target.eos_ids == frozenset({151645})
    assert pair.target.vocab_size == 151936


@pytest.mark.parametrize("mode", ["model", "hybrid"])
def test_greedy_chat_reply_is_identical_to_target_only(engine: Engine, pair: ModelPair, mode: str):
    target = reply(engine, pair, "What does a Python list comprehension do? One sentence.", "target",
                   max_new_tokens=40)
    speculative = reply(engine, pair, "What does a Python list comprehension do? One sentence.", mode,
                        k=5, max_new_tokens=40)
    assert speculative.token_ids == target.token_ids
    assert len(target.text) > 20


def test_acceptance_on_a_code_prompt_is_reported(engine: Engine, pair: ModelPair):
    target = reply(engine, pair, CODE_PROMPT, "target", max_new_tokens=96)
    speculative = reply(engine, pair, CODE_PROMPT, "model", k=4, max_new_tokens=96)
    summary = speculative.summary
    print(
        f"\ncode prompt, 96 tokens: target-only {target.summary.tokens_per_s:.2f} tok/s, "
        f"speculative k=4 {summary.tokens_per_s:.2f} tok/s, acceptance {summary.acceptance_rate:.3f}, "
        f"mean accepted/step {summary.mean_accepted:.2f}"
    )
    assert speculative.token_ids == target.token_ids
    assert "def " in speculative.text
    assert summary.acceptance_rate is not None and summary.acceptance_rate > 0.5


def test_the_default_pair_served_over_http_gives_one_greedy_reply_in_target_and_hybrid(pair: ModelPair,
                                                                                       engine: Engine):
    import openai
    from serving import running_server

    runtime = Runtime(load_settings()[0], pair, engine)
    messages = [{"role": "user", "content": "Write a Python function that reverses a string. Code only."}]
    with running_server(runtime) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        replies = {
            mode: client.chat.completions.create(model=DEFAULT_TARGET, messages=messages, max_tokens=48,
                                                 temperature=0, extra_body={"speculative": {"mode": mode}})
            for mode in ("target", "hybrid")
        }
    target, hybrid = (replies[m].choices[0].message.content for m in ("target", "hybrid"))
    report = replies["hybrid"].model_extra["speculative"]
    print(f"\nserved, 48 tokens: target {replies['target'].model_extra['speculative']['tokens_per_s']:.2f} tok/s, "
          f"hybrid {report['tokens_per_s']:.2f} tok/s, acceptance {report['acceptance_rate']}")
    assert hybrid == target and "def " in target
    assert report["mode"] == "hybrid" and report["accepted_tokens"] > 0


def test_injected_faults_on_the_real_pair_leave_the_greedy_reply_identical(pair: ModelPair, engine: Engine):
    from specdec_tui.config import FaultSettings, ResilienceSettings

    settings = load_settings()[0].model_copy(update={
        "faults": FaultSettings(target_raise=0.25, target_nan=0.1, draft_raise=0.2, seed=3),
        "resilience": ResilienceSettings(fail_max=50, step_timeout=0)})
    faulty, breakers = build_engine(pair, settings)
    question = "Write a Python function that returns the square of a number."
    injured = reply(faulty, pair, question, "hybrid", max_new_tokens=32)
    clean = reply(engine, pair, question, "target", max_new_tokens=32)
    print(f"\nreal pair under faults: {injured.summary.target_failures} target and {injured.summary.draft_failures} "
          f"draft passes failed, {breakers.target.log.trips} trips; identical: {injured.token_ids == clean.token_ids}")
    assert injured.token_ids == clean.token_ids
    assert injured.summary.target_failures > 0 and injured.summary.degraded_tokens == 0


def test_the_default_pair_in_one_ray_replica_answers_as_the_engine_does(pair: ModelPair, engine: Engine):
    """specdec-serve --ray on a local cluster: the replica loads the default pair from the cache itself."""
    ray = pytest.importorskip("ray")
    import openai
    from ray import serve
    from serving import free_port

    from specdec_tui.config import RaySettings, ServerSettings
    from specdec_tui.scaleout.launch import deploy, local_cluster_env, undeploy

    settings = load_settings()[0].model_copy(update={"server": ServerSettings(host="127.0.0.1", port=free_port()),
                                                     "ray": RaySettings(replicas=1, cpus_per_replica=2)})
    question = "Write a Python function that reverses a string. Code only."
    expected = reply(engine, pair, question, "hybrid", max_new_tokens=24, temperature=0.0)
    local_cluster_env()
    ray.init(num_cpus=2, include_dashboard=False, namespace="specdec", log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}})
    try:
        deploy(settings)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{settings.server.port}/v1", api_key="unused",
                               max_retries=0, timeout=300)
        response = client.chat.completions.create(model=DEFAULT_TARGET, max_tokens=24, temperature=0,
                                                  messages=[{"role": "user", "content": question}])
    finally:
        undeploy()
        serve.shutdown()
        ray.shutdown()
    report = response.model_extra["speculative"]
    print(f"\nthrough Ray, 24 tokens: {report['tokens_per_s']:.2f} tok/s, acceptance {report['acceptance_rate']}")
    assert response.choices[0].message.content == expected.text and report["accepted_tokens"] > 0
