"""The server under injected faults: a real uvicorn on loopback, many concurrent streaming clients."""

from __future__ import annotations

import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from serving import running_server, serving_settings, tiny_runtime

from specdec_tui.config import FaultSettings, ResilienceSettings
from specdec_tui.engine.faults import Fault, FaultyRunner
from specdec_tui.runtime import Runtime

CHAT = [{"role": "user", "content": "def add(a, b):"}]
REQUESTS, CLIENTS = 200, 8


def faulty_runtime(target_raise: float, *, draft: bool = True, reset_timeout: float = 0.2) -> Runtime:
    settings = serving_settings().model_copy(update={
        "faults": FaultSettings(target_raise=target_raise, seed=11),
        "resilience": ResilienceSettings(fail_max=3, reset_timeout=reset_timeout, step_timeout=0),
    })
    runtime = tiny_runtime(settings=settings)
    if not draft:
        runtime.pair.draft = None
        runtime = Runtime.from_pair(settings, runtime.pair)
    return runtime


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def stream_one(client: openai.OpenAI, index: int) -> tuple[str, bool, str]:
    """(finish reason, degraded, text) of one streamed chat request."""
    stream = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=8, stream=True,
                                            temperature=0, extra_body={"speculative": {"mode": "hybrid"}})
    text, finish, degraded = [], "", False
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
            degraded = bool((chunk.model_extra or {}).get("degraded"))
    return finish, degraded, "".join(text)


def test_two_hundred_streams_with_a_fifth_of_target_passes_failing_all_complete_and_trips_are_counted():
    runtime = faulty_runtime(0.2)
    with running_server(runtime, queue_size=16, request_timeout=120) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        started = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(lambda i: stream_one(client, i), range(REQUESTS)))
        seconds = time.perf_counter() - started
        finishes = Counter(finish for finish, _, _ in results)
        degraded = sum(d for _, d, _ in results)
        health = httpx.get(f"{url}/health", timeout=10)
        scrape = httpx.get(f"{url}/metrics", timeout=10).text
    breaker = runtime.breakers.target  # type: ignore[union-attr]
    print(f"\n{REQUESTS} streamed requests over {CLIENTS} clients in {seconds:.1f} s, 20% of target passes "
          f"failing: finishes {dict(finishes)}, {degraded} degraded, {breaker.log.failures} failed passes, "
          f"{breaker.log.trips} trips")
    assert finishes == {"length": REQUESTS}  # every request completed, normally or degraded; none errored
    assert all(text for _, _, text in results)
    assert breaker.log.trips > 0 and degraded > 0
    assert health.status_code == 200 and health.json()["status"] in ("ok", "degraded")
    assert metric(scrape, 'specdec:breaker_trips_total{model="target"}') == breaker.log.trips
    assert metric(scrape, 'specdec:model_failures_total{model="target"}') == breaker.log.failures
    assert metric(scrape, "specdec:request_degraded_total") == degraded
    assert metric(scrape, 'specdec:request_success_total{finished_reason="length"}') == REQUESTS


def test_health_says_degraded_while_the_target_circuit_is_open_and_replies_say_why():
    runtime = faulty_runtime(1.0, reset_timeout=60)
    with running_server(runtime) as (url, _):
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
            "model": "tiny-qwen2", "messages": CHAT, "max_tokens": 6, "temperature": 0})
        health = httpx.get(f"{url}/health", timeout=10)
        scrape = httpx.get(f"{url}/metrics", timeout=10).text
    body = reply.json()
    assert reply.status_code == 200 and body["degraded"] is True
    report = body["speculative"]
    assert report["degraded_tokens"] == 6 and report["target_failures"] == 3
    assert "target model failed 3 passes in a row" in report["failure"]
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert health.json()["breakers"] == {"target": "open", "draft": "closed"}
    assert metric(scrape, 'specdec:breaker_state{model="target"}') == 2
    assert metric(scrape, "specdec:degraded_tokens_total") == 6


def test_without_a_draft_model_an_open_target_circuit_is_a_503_with_retry_after():
    runtime = faulty_runtime(1.0, draft=False, reset_timeout=60)
    with running_server(runtime) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
        request = {"model": "tiny-qwen2", "messages": CHAT, "max_tokens": 6, "temperature": 0}
        first = httpx.post(f"{url}/v1/chat/completions", timeout=30, json=request)
        second = httpx.post(f"{url}/v1/chat/completions", timeout=30, json=request)  # refused before decoding
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(**request, stream=True)  # type: ignore[call-overload]
    for response in (first, second):
        assert response.status_code == 503 and response.headers["retry-after"] == "60"
        assert response.json()["error"]["code"] == "target_unavailable"
        assert "no draft model is loaded" in response.json()["error"]["message"]
    assert refused.value.status_code == 503


def test_a_stream_whose_target_fails_for_good_without_a_draft_keeps_what_it_sent_and_ends_in_error():
    runtime = faulty_runtime(0.0, draft=False, reset_timeout=60)
    guarded = runtime.engine.target.runner  # the prompt's pass and three steps pass (four tokens), then every pass fails
    passes = iter(range(1000))
    guarded.runner = FaultyRunner(guarded.runner, lambda: Fault.RAISE if next(passes) >= 4 else None)  # type: ignore[attr-defined]
    with running_server(runtime) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
        chunks = list(client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=12, stream=True,
                                                     temperature=0))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert text and final.choices[0].finish_reason == "error"
    report = (final.model_extra or {})["speculative"]["report"]
    assert report["completion_tokens"] == 4 and "failed 3 passes in a row" in report["failure"]
