"""The parts of specdec-serve --ray that need no cluster: routing keys, the replica order, merged metrics,
driving the server's app in process, and the Serve options the settings make."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")
from prometheus_client.parser import text_string_to_metric_families
from ray.serve.request_router import PendingRequest
from serving import serving_settings, tiny_runtime

from specdec_tui.config import RaySettings, SettingsError, load_settings
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.runtime import Runtime
from specdec_tui.scaleout.asgi import HTTPCall, ResponseBody, ResponseStart, asgi_response
from specdec_tui.scaleout.launch import replica_options, settings_from_builder_args
from specdec_tui.scaleout.merged_metrics import merge_expositions
from specdec_tui.scaleout.routing import AffinityRouter, affinity_key, preferred_order
from specdec_tui.server.app import ServerState, create_app
from specdec_tui.server.metrics import ServerMetrics

SYSTEM = {"role": "system", "content": "Be brief."}


def chat_body(*messages: dict[str, str]) -> bytes:
    return json.dumps({"model": "m", "messages": list(messages)}).encode()


# ------------------------------------------------------------------ which replica


def test_a_conversations_turns_share_one_affinity_key_and_other_conversations_do_not():
    first = chat_body(SYSTEM, {"role": "user", "content": "def add(a, b):"})
    follow_up = chat_body(SYSTEM, {"role": "user", "content": "def add(a, b):"},
                          {"role": "assistant", "content": "return a + b"}, {"role": "user", "content": "and sub?"})
    other = chat_body(SYSTEM, {"role": "user", "content": "class Point:"})
    key = affinity_key("/v1/chat/completions", first)
    assert key is not None and key == affinity_key("/v1/chat/completions", follow_up)
    assert key != affinity_key("/v1/chat/completions", other)
    prompt = "def add(a, b):\n    return a + b\n" * 20
    assert affinity_key("/v1/completions", json.dumps({"prompt": prompt}).encode()) == affinity_key(
        "/v1/completions", json.dumps({"prompt": prompt + "\ndef sub(a, b):"}).encode())


@pytest.mark.parametrize("path, body", [("/v1/models", b""), ("/v1/chat/completions", b"{not json"),
                                        ("/v1/chat/completions", b"[1, 2]"), ("/generate", b'{"max_new_tokens": 3}')])
def test_requests_without_a_conversation_have_no_affinity_key(path: str, body: bytes):
    assert affinity_key(path, body) is None


def test_losing_a_replica_moves_only_the_conversations_it_held():
    keys = [f"conversation-{i}" for i in range(2000)]
    replicas = ["r1", "r2", "r3", "r4"]
    home = {key: preferred_order(key, replicas)[0] for key in keys}
    after = {key: preferred_order(key, ["r1", "r2", "r4"])[0] for key in keys}
    moved = {key for key in keys if home[key] != after[key]}
    assert moved == {key for key in keys if home[key] == "r3"}
    shares = [sum(h == r for h in home.values()) / len(keys) for r in replicas]
    assert all(0.2 < share < 0.3 for share in shares), shares


async def test_the_router_puts_the_conversations_replica_first_and_the_rest_after():
    replicas = [SimpleNamespace(replica_id=SimpleNamespace(unique_id=name)) for name in ("a", "b", "c")]
    pending = PendingRequest(args=[], kwargs={"affinity": "conversation-7"}, metadata=None)  # type: ignore[arg-type]
    ranks = await AffinityRouter.choose_replicas(None, replicas, pending)  # type: ignore[arg-type]
    order = preferred_order("conversation-7", ["a", "b", "c"])
    assert [[r.replica_id.unique_id for r in rank] for rank in ranks] == [order[:1], order[1:]]
    unkeyed = PendingRequest(args=[], kwargs={}, metadata=None)  # type: ignore[arg-type]
    assert await AffinityRouter.choose_replicas(None, replicas, unkeyed) == [replicas]  # type: ignore[arg-type]
    # When every replica is busy, Serve's loop waits before asking again instead of polling flat out.
    assert pending.routing_context.should_backoff and unkeyed.routing_context.should_backoff


# ------------------------------------------------------------------ merged metrics


def replica_metrics(steps: int, breaker: int) -> str:
    metrics = ServerMetrics(running=lambda: 1, waiting=lambda: 2)
    for i in range(steps):
        metrics.observe_step(StepRecord(drafted=4, accepted=3, emitted=4, draft_s=0.01, verify_s=0.02), first=i == 0)
    text = metrics.exposition().decode()
    return text + (f'# HELP specdec:breaker_state s\n# TYPE specdec:breaker_state gauge\n'
                   f'specdec:breaker_state{{model="target"}} {breaker}\n')


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_merged_metrics_sum_counters_gauges_and_histograms_and_keep_the_worst_circuit():
    merged = samples(merge_expositions({"r1": replica_metrics(3, 0), "r2": replica_metrics(5, 2)}))
    assert merged[("specdec:generation_tokens_total", ())] == 32
    assert merged[("specdec:spec_decode_num_accepted_tokens_per_pos_total", (("position", "2"),))] == 8
    assert merged[("specdec:num_requests_waiting", ())] == 4
    assert merged[("specdec:inter_token_latency_seconds_count", ())] == 4 * 8 - 4 - 4
    assert merged[("specdec:breaker_state", (("model", "target"),))] == 2
    assert not any(name.endswith("_created") for name, _ in merged)


def test_per_replica_metrics_carry_a_replica_label_and_add_up_to_the_merged_ones():
    texts = {"r1": replica_metrics(3, 0), "r2": replica_metrics(5, 0)}
    labelled = samples(merge_expositions(texts, per_replica=True))
    assert labelled[("specdec:generation_tokens_total", (("replica", "r1"),))] == 12
    assert labelled[("specdec:generation_tokens_total", (("replica", "r2"),))] == 20


# ------------------------------------------------------------------ the server's app in process


def collect(runtime: Runtime, call: HTTPCall) -> tuple[ResponseStart, bytes]:
    app = create_app(ServerState(serving_settings(), None))
    app.state.specdec.ready(runtime)

    async def run() -> tuple[ResponseStart, bytes]:
        parts = [part async for part in asgi_response(app, call)]
        assert isinstance(parts[0], ResponseStart) and all(isinstance(p, ResponseBody) for p in parts[1:])
        return parts[0], b"".join(p.body for p in parts[1:])  # type: ignore[union-attr]

    try:
        return asyncio.run(run())
    finally:
        app.state.specdec.close()


def test_a_request_driven_through_the_app_in_process_gets_the_servers_own_answer():
    runtime = tiny_runtime()
    body = json.dumps({"model": "tiny-qwen2", "messages": [{"role": "user", "content": "def add(a, b):"}],
                       "max_tokens": 5, "temperature": 0}).encode()
    start, raw = collect(runtime, HTTPCall("POST", "/v1/chat/completions", "",
                                           (("content-type", "application/json"),), body))
    reply = json.loads(raw)
    expected = list(runtime.reply([{"role": "user", "content": "def add(a, b):"}],
                                  runtime.params(max_new_tokens=5, temperature=0.0), "hybrid"))[-1].text
    assert start.status == 200 and reply["choices"][0]["message"]["content"] == expected
    assert reply["usage"]["completion_tokens"] == 5
    bad, raw = collect(runtime, HTTPCall("POST", "/v1/chat/completions", "", (), b"{"))
    assert bad.status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_closing_a_streamed_response_early_cancels_its_reply():
    runtime = tiny_runtime(delay=0.05)
    app = create_app(ServerState(serving_settings(), None))
    state = app.state.specdec
    state.ready(runtime)
    body = json.dumps({"model": "tiny-qwen2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
                       "stream": True}).encode()

    async def read_two_chunks_then_leave() -> None:
        parts = asgi_response(app, HTTPCall("POST", "/v1/chat/completions", "", (), body))
        async for part in parts:
            if isinstance(part, ResponseBody) and b'"content"' in part.body:
                assert state.running  # the reply is under way: 200 tokens take seconds
                break
        await parts.aclose()
        for _ in range(100):
            if not state.running:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the reply went on after its caller left")

    try:
        asyncio.run(read_two_chunks_then_leave())
    finally:
        state.close()


# ------------------------------------------------------------------ settings to Serve options


def test_the_ray_settings_become_the_engine_deployments_serve_options():
    settings = serving_settings(queue_size=5)
    fixed = replica_options(settings.model_copy(update={"ray": RaySettings(replicas=3, cpus_per_replica=2)}))
    assert fixed["num_replicas"] == 3 and fixed["ray_actor_options"]["num_cpus"] == 2
    assert fixed["max_ongoing_requests"] == 1 and fixed["max_queued_requests"] == 5
    assert "request_router_config" in fixed and "autoscaling_config" not in fixed
    auto = replica_options(settings.model_copy(update={"ray": RaySettings(
        replicas="auto", min_replicas=1, max_replicas=6, target_ongoing_requests=2, affinity=False)}))
    assert auto["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 6, "target_ongoing_requests": 2}
    assert "num_replicas" not in auto and "request_router_config" not in auto
    split = replica_options(settings.model_copy(update={"ray": RaySettings(draft_actor=True, draft_cpus=1)}))
    assert split["placement_group_bundles"] == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert split["placement_group_strategy"] == "STRICT_PACK"


@pytest.mark.parametrize("values, message", [({"replicas": "0"}, "at least 1"), ({"replicas": "many"}, "replicas"),
                                             ({"min_replicas": "5", "max_replicas": "2"}, "above max_replicas")])
def test_bad_ray_settings_are_one_line_errors(values: dict[str, str], message: str):
    with pytest.raises(SettingsError, match=message):
        load_settings({"ray": values})


def test_the_application_builder_reads_settings_as_the_command_line_does():
    settings = settings_from_builder_args({"ray.replicas": "4", "decoding.k": "6"})
    assert settings.ray.replicas == 4 and settings.decoding.k == 6
    assert settings_from_builder_args({"ray.replicas": "auto"}).ray.replicas == "auto"
    with pytest.raises(ValueError, match="expected group.name"):
        settings_from_builder_args({"replicas": "2"})
