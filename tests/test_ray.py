"""specdec-serve --ray on a real local Ray cluster: engine replicas of the tiny pair behind one endpoint.

The cluster is started here with a fixed number of CPUs, on loopback, and torn down after; each
deployment is taken down by the test that made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

ray = pytest.importorskip("ray")
from otlp_receiver import otlp_receiver
from ray import serve
from ray_models import tiny_draft, tiny_replica_pair
from serving import free_port, serving_settings, tiny_runtime

from specdec_tui.config import FaultSettings, RaySettings, ResilienceSettings, Settings, TelemetrySettings
from specdec_tui.runtime import Runtime
from specdec_tui.scaleout import REPLICA_HEADER
from specdec_tui.scaleout.launch import APP_NAME, deploy, local_cluster_env, undeploy
from specdec_tui.scaleout.routing import affinity_key, preferred_order

TESTS = Path(__file__).parent
TIMEOUT = 60
MAX_TOKENS = 12
KILL_MAX_TOKENS = 48  # long enough that a killed replica is mid-reply


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    local_cluster_env()
    ray.init(num_cpus=4, include_dashboard=False, namespace="specdec", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS), "HF_HUB_OFFLINE": "1",
                                       "TRANSFORMERS_VERBOSITY": "error",
                                       # spans leave the replicas within half a second, not five
                                       "OTEL_BSP_SCHEDULE_DELAY": "500",
                                       # Serve's router asks a replica its queue length with a 0.1 s
                                       # deadline and, on no answer, takes the next rank: the other
                                       # replica, which the affinity test would see as a moved turn.
                                       "RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S": "2",
                                       "RAY_SERVE_MAX_QUEUE_LENGTH_RESPONSE_DEADLINE_S": "5"}})
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def ray_settings(**ray_fields: Any) -> Settings:
    settings = serving_settings(queue_size=32, request_timeout=TIMEOUT)
    server = settings.server.model_copy(update={"port": free_port()})
    return settings.model_copy(update={"server": server, "ray": RaySettings(**ray_fields)})


@contextlib.contextmanager
def deployed(settings: Settings, delay: float = 0.0, draft_factory: bool = False) -> Iterator[str]:
    """The application on the running cluster, serving the tiny pair; yields its base URL."""
    deploy(settings, functools.partial(tiny_replica_pair, delay=delay), tiny_draft if draft_factory else None)
    try:
        yield f"http://127.0.0.1:{settings.server.port}"
    finally:
        undeploy()
        serve.shutdown()


def expected_reply(runtime: Runtime, messages: list[dict[str, str]], mode: str = "hybrid") -> str:
    """The single-process server's greedy reply: the engine's, on the same tiny pair."""
    events = list(runtime.reply(messages, runtime.params(max_new_tokens=MAX_TOKENS, temperature=0.0), mode))
    return events[-1].text


@pytest.fixture(scope="module")
def single_process() -> Runtime:
    return tiny_runtime()


def conversation(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": f"You answer question {i}."},
            {"role": "user", "content": ["def add(a, b):", "for i in range(10):", "class Point:"][i % 3] + f" #{i}"}]


async def ask_all(url: str, conversations: list[list[dict[str, str]]], stream_every: int = 2,
                  max_tokens: int = MAX_TOKENS, on_stream_start: Callable[[str], None] | None = None) -> list[Any]:
    """Every conversation at once (each ``stream_every``-th streamed); ``on_stream_start`` hears the
    replica of each stream as its first chunk arrives, while that replica is still answering it."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", timeout=TIMEOUT, max_retries=0)

    async def ask(i: int, messages: list[dict[str, str]]) -> tuple[str, str]:
        if i % stream_every:
            raw = await client.chat.completions.with_raw_response.create(
                model="tiny-qwen2", messages=messages, max_tokens=max_tokens, temperature=0)
            return raw.parse().choices[0].message.content, raw.headers[REPLICA_HEADER]
        async with client.chat.completions.with_streaming_response.create(
                model="tiny-qwen2", messages=messages, max_tokens=max_tokens, temperature=0, stream=True) as raw:
            parts = []
            async for chunk in await raw.parse():
                if on_stream_start and not parts:
                    on_stream_start(raw.headers[REPLICA_HEADER])
                parts.extend(c.delta.content or "" for c in chunk.choices)
            return "".join(parts), raw.headers[REPLICA_HEADER]

    try:
        return await asyncio.gather(*(ask(i, m) for i, m in enumerate(conversations)), return_exceptions=True)
    finally:
        await client.close()


def test_sixteen_concurrent_requests_over_two_replicas_are_all_answered_as_the_single_server_answers(
        cluster: None, single_process: Runtime):
    conversations = [conversation(i) for i in range(16)]
    with deployed(ray_settings(replicas=2)) as url:
        results = asyncio.run(ask_all(url, conversations))
        time.sleep(1.5)  # a replica posts its state every second
        health = httpx.get(f"{url}/health", timeout=TIMEOUT).json()
        metrics = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures
    assert [text for text, _ in results] == [expected_reply(single_process, m) for m in conversations]
    replicas = {replica for _, replica in results}
    assert len(replicas) == 2, f"one replica answered all 16: {replicas}"
    assert health["status"] == "ok" and health["replicas"]["ready"] == 2 and health["replicas"]["capacity"] == 2
    assert set(health["per_replica"]) == replicas
    assert 'specdec:request_success_total{finished_reason="length"} 16.0' in metrics


def running_replicas(client: httpx.Client, url: str, count: int) -> list[str]:
    """The ids of the deployment's replicas, once ``count`` of them have posted their state."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        replicas = list(client.get(f"{url}/health").json().get("per_replica", {}))
        if len(replicas) == count:
            return replicas
        time.sleep(0.25)
    raise AssertionError(f"{count} replicas did not post their state within {TIMEOUT} s")


def test_a_conversations_turns_go_to_the_replica_that_holds_its_cache(cluster: None):
    client = httpx.Client(timeout=TIMEOUT)
    with deployed(ray_settings(replicas=2)) as url:
        replicas = running_replicas(client, url, 2)

        def home(messages: list[dict[str, str]]) -> str:
            key = affinity_key("/v1/chat/completions", json.dumps({"messages": messages}).encode())
            assert key is not None
            return preferred_order(key, replicas)[0]

        # Replica ids are random, so six arbitrary conversations would all hash to one replica 1 time
        # in 32: take the first three homed on each instead.
        chosen = [i for r in replicas for i in [i for i in range(64) if home(conversation(i)) == r][:3]]
        assert len(chosen) == 6, "64 conversations did not give three homes on each replica"
        for i in chosen:
            messages = conversation(i)
            turns = []
            for turn in range(3):
                response = client.post(f"{url}/v1/chat/completions", json={
                    "model": "tiny-qwen2", "messages": messages, "max_tokens": 4, "temperature": 0})
                assert response.status_code == 200, response.text
                turns.append(response.headers[REPLICA_HEADER])
                reply = response.json()["choices"][0]["message"]["content"]
                messages = [*messages, {"role": "assistant", "content": reply},
                            {"role": "user", "content": f"and then {turn}?"}]
            assert turns == [home(conversation(i))] * 3, f"conversation {i} left its replica: {turns}"


def test_merged_metrics_are_the_sum_of_each_replicas(cluster: None):
    with deployed(ray_settings(replicas=2)) as url:
        asyncio.run(ask_all(url, [conversation(i) for i in range(8)]))
        time.sleep(1.5)  # a replica posts its metrics every second
        merged = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
        per_replica = httpx.get(f"{url}/metrics/replicas", timeout=TIMEOUT).text

    def values(text: str, name: str) -> list[float]:
        return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]

    tokens = "specdec:generation_tokens_total"
    assert values(merged, tokens) == [8.0 * MAX_TOKENS]
    assert len(values(per_replica, tokens)) == 2 and sum(values(per_replica, tokens)) == 8.0 * MAX_TOKENS
    assert 'specdec:ray_requests_routed_total{replica="' in merged


def replica_actor(replica: str) -> Any:
    return ray.get_actor(f"SERVE_REPLICA::{APP_NAME}#EngineReplica#{replica}", namespace="serve")


def test_a_replica_killed_mid_load_loses_no_request_and_serve_restarts_it(cluster: None):
    conversations = [conversation(i) for i in range(16)]
    with deployed(ray_settings(replicas=2), delay=0.1) as url:
        killed: list[str] = []

        def kill_the_first_streaming_replica(replica: str) -> None:
            # Its stream has just begun and has tens of target passes to go: the kill lands mid-request.
            if not killed:
                killed.append(replica)
                ray.kill(replica_actor(replica), no_restart=True)

        results = asyncio.run(ask_all(url, conversations, stream_every=2, max_tokens=KILL_MAX_TOKENS,
                                      on_stream_start=kill_the_first_streaming_replica))
        assert killed
        answered = [r for r in results if not isinstance(r, BaseException)]
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(answered) + len(errors) == 16
        assert len(answered) >= 8, errors
        # A non-streamed response starts only when it is whole, so a lost replica's is always retried.
        assert all(not isinstance(results[i], BaseException) for i in range(1, 16, 2)), results
        for exc in errors:  # a clean error the client can read, never a hang or a silent loss
            assert isinstance(exc, openai.APIError), repr(exc)
            assert "replica" in str(exc), str(exc)
        # Two ready without the killed one: its last post counts for a while, so "two" alone could
        # be the survivor and a ghost.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            health = httpx.get(f"{url}/health", timeout=TIMEOUT).json()
            if health["replicas"]["ready"] == 2 and killed[0] not in health["per_replica"]:
                break
            assert health["replicas"]["ready"] >= 1
            time.sleep(1)
        assert health["replicas"]["ready"] == 2 and killed[0] not in health["per_replica"], health
        after = asyncio.run(ask_all(url, conversations[:4]))
        assert all(not isinstance(r, BaseException) for r in after), after
        front = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    lost = sum(float(line.rsplit(" ", 1)[1]) for line in front.splitlines()
               if line.startswith("specdec:ray_replica_lost_total"))
    assert lost >= 1, "the kill hit no request in flight: the test did not test anything"
    print(f"\nkilled replica: {len(answered)} of 16 answered, {len(errors)} clean errors, "
          f"{lost:g} requests lost their replica ({[str(e)[:60] for e in errors]})")


def test_the_draft_model_in_its_own_actor_writes_the_same_replies(cluster: None, single_process: Runtime):
    conversations = [conversation(i) for i in range(3)]
    with deployed(ray_settings(replicas=1, draft_actor=True), draft_factory=True) as url:
        results = asyncio.run(ask_all(url, conversations))
    assert [text for text, _ in results] == [expected_reply(single_process, m) for m in conversations]


def test_a_requests_trace_runs_from_the_front_into_the_replica(cluster: None):
    server_kind = 2  # SPAN_KIND_SERVER
    with otlp_receiver() as (endpoint, received):
        settings = ray_settings(replicas=1).model_copy(update={"telemetry": TelemetrySettings(
            enabled=True, exporter="otlp", endpoint=endpoint, step_spans=False)})
        with deployed(settings) as url:
            response = httpx.post(f"{url}/v1/chat/completions", timeout=TIMEOUT, json={
                "model": "tiny-qwen2", "messages": conversation(0), "max_tokens": 4, "temperature": 0})
            assert response.status_code == 200, response.text
            # Each process exports on its own schedule: wait for the reply span's parent and its
            # parent, not for a count of spans (the replica's own ASGI spans can come first).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                spans = received.snapshot()
                by_id = {s.span_id: s for s in spans}
                chat = [s for s in spans if s.name == "chat tiny-qwen2"]
                replica_request = by_id.get(chat[0].parent_id) if chat else None
                if replica_request is not None and replica_request.parent_id in by_id:
                    break
                time.sleep(0.5)
    assert chat, f"no reply span arrived: {[s.name for s in spans]}"
    assert replica_request is not None, f"the reply span's parent never arrived: {[s.name for s in spans]}"
    assert replica_request.parent_id in by_id, (
        f"the replica's request span has no parent from the front: {[(s.name, s.parent_id) for s in spans]}")
    front_request = by_id[replica_request.parent_id]
    assert replica_request.kind == server_kind and replica_request.name == "POST /v1/chat/completions"
    # The replica's request span has a parent only because the front's trace context crossed over.
    assert front_request.kind == server_kind and front_request.parent_id == ""


def test_each_replica_has_its_own_circuit_breakers_and_health_shows_them(cluster: None):
    settings = ray_settings(replicas=2).model_copy(update={
        "faults": FaultSettings(target_raise=1.0), "resilience": ResilienceSettings(fail_max=1, reset_timeout=600)})
    with deployed(settings) as url:
        results = asyncio.run(ask_all(url, [conversation(i) for i in range(8)], stream_every=1))
        time.sleep(1.5)  # a replica posts its state every second
        health = httpx.get(f"{url}/health", timeout=TIMEOUT).json()
    assert all(not isinstance(r, BaseException) for r in results), results
    # Every target pass raises: each replica's own target circuit opened, and its draft wrote alone.
    assert health["status"] == "degraded" and set(health["degraded"]) == set(health["per_replica"])
    assert len(health["per_replica"]) == 2
    for replica in health["per_replica"].values():
        assert replica["breakers"] == {"target": "open", "draft": "closed"}
        assert replica["fault_injection"]

