"""specdec-serve as its users drive it: a real uvicorn on loopback, the openai client and httpx."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from serving import running_server, tiny_runtime

from specdec_tui.bench import cli
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent
from specdec_tui.runtime import Runtime
from specdec_tui.server.replies import StopFilter

CHAT = [{"role": "user", "content": "def add(a, b):"}]
TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return tiny_runtime()


@pytest.fixture(scope="module")
def server(runtime: Runtime) -> Iterator[str]:
    with running_server(runtime) as (url, _):
        yield url


@pytest.fixture
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=30)


def engine_reply(runtime: Runtime, messages: list[dict[str, str]], max_tokens: int, mode: str = "target",
                 k: int = 4) -> FinishedEvent:
    runtime.engine.reset()
    params = runtime.params(max_new_tokens=max_tokens, k=k, adaptive_k=False)
    finished = list(runtime.engine.generate(runtime.prompt_ids(messages), params, mode))[-1]
    assert isinstance(finished, FinishedEvent)
    return finished


def sse_events(response: httpx.Response) -> list[dict | str]:
    events: list[dict | str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


# ------------------------------------------------------------------ the OpenAI API


def test_a_chat_completion_is_the_engines_greedy_reply_with_its_speculation_report(
        runtime: Runtime, client: openai.OpenAI):
    reference = engine_reply(runtime, CHAT, 24)
    completion = client.chat.completions.create(
        model="tiny-qwen2", messages=CHAT, max_tokens=24, temperature=0,
        extra_body={"speculative": {"mode": "hybrid", "k": 3, "adaptive_k": False, "lookup_k": 0}})
    assert completion.choices[0].message.content == reference.text
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 24
    assert completion.usage.prompt_tokens == len(runtime.prompt_ids(CHAT))
    report = completion.model_extra["speculative"]
    assert report["mode"] == "hybrid" and report["k"] == 3 and report["tau"] == 1.0 and report["lossless"]
    assert report["lookup_k"] == 0  # copies no longer than k: every draft position is one of the k
    histogram = report["acceptance_histogram"]  # steps that drafted, by how many drafts they kept
    assert report["completion_tokens"] == 24 and 0 < sum(histogram) <= report["steps"]
    assert sum(kept * steps for kept, steps in enumerate(histogram)) == report["accepted_tokens"]
    assert report["acceptance_rate"] == pytest.approx(report["accepted_tokens"] / report["draft_tokens"])
    assert report["mean_acceptance_length"] == pytest.approx(1 + report["accepted_tokens"] / report["steps"])
    assert len(report["per_position_acceptance"]) <= 3


@pytest.mark.parametrize("mode,k", [("model", 1), ("model", 4), ("hybrid", 2), ("prompt-lookup", 5), ("model", 8)])
def test_greedy_output_through_the_api_is_identical_across_modes_and_draft_lengths(
        runtime: Runtime, client: openai.OpenAI, mode: str, k: int):
    target = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=32,
                                            extra_body={"speculative": {"mode": "target"}})
    speculative = client.chat.completions.create(
        model="tiny-qwen2", messages=CHAT, max_tokens=32,
        extra_body={"speculative": {"mode": mode, "k": k, "adaptive_k": False}})
    assert speculative.choices[0].message.content == target.choices[0].message.content
    assert target.model_extra["speculative"]["draft_tokens"] == 0
    if mode != "prompt-lookup":
        assert speculative.model_extra["speculative"]["draft_tokens"] > 0


def test_a_streamed_chat_adds_up_to_the_whole_reply_and_ends_with_report_and_usage(
        runtime: Runtime, client: openai.OpenAI):
    whole = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=20)
    stream = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    report = finals[0].model_extra["speculative"]["report"]
    assert report["completion_tokens"] == 20
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20


def test_origins_say_per_token_whether_the_draft_or_the_target_wrote_it(runtime: Runtime, server: str):
    reference = engine_reply(runtime, CHAT, 24, mode="model", k=4)
    body = {"model": "tiny-qwen2", "messages": CHAT, "max_tokens": 24, "stream": True,
            "speculative": {"mode": "model", "k": 4, "adaptive_k": False, "origins": True, "fresh_cache": True}}
    with httpx.stream("POST", f"{server}/v1/chat/completions", json=body, timeout=TIMEOUT) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    steps = [e["speculative"] for e in events[:-1] if "step" in e.get("speculative", {})]
    tokens = [t for s in steps for t in s["tokens"]]
    assert [t["id"] for t in tokens] == list(reference.token_ids)
    for step in steps:
        origins = [t["origin"] for t in step["tokens"]]
        accepted = step["step"]["accepted"]
        assert origins == ["draft"] * accepted + ["target"] * (len(origins) - accepted)
        assert step["step"]["emitted"] == len(origins)
    report = events[-2]["speculative"]["report"]
    assert report["accepted_tokens"] == sum(s["step"]["accepted"] for s in steps) > 0


def test_completions_take_raw_text_without_the_chat_template(runtime: Runtime, client: openai.OpenAI):
    prompt = "def add(a, b):\n    return"
    runtime.engine.reset()
    ids = runtime.pair.target.tokenizer.encode(prompt)
    reference = list(runtime.engine.generate(ids, DecodeParams(max_new_tokens=12), "target"))[-1]
    completion = client.completions.create(model="tiny-qwen2", prompt=prompt, max_tokens=12,
                                           extra_body={"speculative": {"mode": "model"}})
    assert completion.choices[0].text == reference.text
    assert completion.usage.prompt_tokens == len(ids)
    streamed = client.completions.create(model="tiny-qwen2", prompt=prompt, max_tokens=12, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == reference.text


def test_a_stop_string_ends_the_reply_before_it(runtime: Runtime, client: openai.OpenAI):
    text = engine_reply(runtime, CHAT, 40).text
    stop = text[10:13]
    expected = text[: text.index(stop)]
    whole = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=40, stop=[stop, "\x00"])
    assert whole.choices[0].message.content == expected
    assert whole.choices[0].finish_reason == "stop"
    assert whole.model_extra["speculative"]["finish_reason"] == "stop"
    stream = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=40, stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == expected


def test_generate_returns_text_with_acceptance_and_latency(runtime: Runtime, server: str):
    reference = engine_reply(runtime, CHAT, 16)
    response = httpx.post(f"{server}/generate", json={"messages": CHAT, "max_new_tokens": 16, "k": 3,
                                                      "mode": "model", "temperature": 0}, timeout=TIMEOUT)
    assert response.status_code == 200
    body = response.json()
    assert body["text"] == reference.text
    assert body["steps"] == body["speculative"]["steps"] > 0
    assert body["acceptance_rate"] == pytest.approx(body["accepted"] / body["drafted"])
    assert body["mean_accepted_per_step"] == pytest.approx(body["accepted"] / body["steps"])
    assert body["latency_ms"] >= body["ttft_ms"] > 0 and body["tokens_per_s"] > 0
    assert body["finish_reason"] == "length"
    raw = httpx.post(f"{server}/generate", json={"prompt": "def add(a, b):", "max_new_tokens": 4}, timeout=TIMEOUT)
    assert raw.status_code == 200 and raw.json()["speculative"]["prompt_tokens"] == len(
        runtime.pair.target.tokenizer.encode("def add(a, b):"))


def test_models_lists_the_loaded_pair(client: openai.OpenAI):
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny-qwen2"]
    assert models[0].model_extra["draft"] == "tiny-qwen2-draft"
    assert set(models[0].model_extra["modes"]) == {"model", "prompt-lookup", "hybrid", "target"}


def test_a_follow_up_turn_reuses_the_kv_cache(runtime: Runtime, client: openai.OpenAI):
    fed: list[int] = []
    runner = runtime.engine.target.runner
    forward = runner.forward

    def counting(ids: list[int], n_logits: int):  # type: ignore[no-untyped-def]
        fed.append(len(ids))
        return forward(ids, n_logits)

    first = client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=8,
                                           extra_body={"speculative": {"fresh_cache": True}})
    follow_up = [*CHAT, {"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "and subtract"}]
    runner.forward = counting  # type: ignore[method-assign]
    try:
        # target-only: its first pass reads the prompt alone (a `hybrid` one may add a copy from it)
        client.chat.completions.create(model="tiny-qwen2", messages=follow_up, max_tokens=8,
                                       extra_body={"speculative": {"mode": "target"}})
    finally:
        runner.forward = forward  # type: ignore[method-assign]
    prompt_length = len(runtime.prompt_ids(follow_up))
    assert fed[0] <= prompt_length - len(runtime.prompt_ids(CHAT))  # the first turn's prompt was not read again


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("body,status,param,pattern", [
    ({"model": "tiny-qwen2", "messages": CHAT, "speculative": {"k": 0}}, 400, "speculative.k", "greater than or equal to 1"),
    ({"model": "tiny-qwen2", "messages": CHAT, "speculative": {"k": 33}}, 400, "speculative.k", "less than or equal"),
    ({"model": "tiny-qwen2", "messages": CHAT, "speculative": {"tau": 1.5}}, 400, "speculative.tau", "less than or"),
    ({"model": "tiny-qwen2", "messages": CHAT, "speculative": {"mode": "oracle"}}, 400, "speculative.mode",
     "unknown mode 'oracle'"),
    ({"model": "tiny-qwen2", "messages": CHAT, "speculative": {"kk": 2}}, 400, "speculative.kk", "unknown field"),
    ({"model": "tiny-qwen2", "messages": CHAT, "max_token": 5}, 400, "max_token", "unknown field"),
    ({"model": "tiny-qwen2", "messages": CHAT, "n": 2}, 400, "n", "n = 2 is not supported"),
    ({"model": "tiny-qwen2", "messages": CHAT, "tools": [{"type": "function"}]}, 400, "tools", "not supported"),
    ({"model": "tiny-qwen2", "messages": CHAT, "temperature": -1}, 400, "temperature", "greater than or equal"),
    ({"model": "tiny-qwen2", "messages": CHAT, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "at most 4"),
    ({"model": "tiny-qwen2", "messages": []}, 400, "messages", "at least 1"),
    ({"model": "tiny-qwen2"}, 400, "messages", "missing field messages"),
    ({"model": "gpt-4o", "messages": CHAT}, 404, "model", "'gpt-4o' does not exist"),
    ({"model": "tiny-qwen2", "messages": [{"role": "user", "content": "word " * 400}]}, 400, "messages",
     "context holds 256"),
])
def test_bad_chat_requests_get_the_openai_error_object(server: str, body: dict, status: int, param: str,
                                                       pattern: str):
    response = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert re.search(pattern, error["message"]), error["message"]


def test_an_over_long_prompt_is_context_length_exceeded_and_the_server_goes_on(server: str, client: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny-qwen2", messages=[{"role": "user", "content": "word " * 400}])
    assert info.value.code == "context_length_exceeded"
    assert client.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=2).choices


def test_malformed_json_and_bad_generate_bodies_are_400s(server: str):
    broken = httpx.post(f"{server}/v1/chat/completions", content=b'{"model": "tiny-qwen2", "messages": [',
                        headers={"content-type": "application/json"}, timeout=TIMEOUT)
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]
    both = httpx.post(f"{server}/generate", json={"prompt": "x", "messages": CHAT}, timeout=TIMEOUT)
    assert both.status_code == 400 and "exactly one of prompt or messages" in both.json()["error"]["message"]
    extra = httpx.post(f"{server}/generate", json={"prompt": "x", "beam": 2}, timeout=TIMEOUT)
    assert extra.status_code == 400 and extra.json()["error"]["param"] == "beam"
    bad_k = httpx.post(f"{server}/generate", json={"prompt": "x", "k": 0}, timeout=TIMEOUT)
    assert bad_k.status_code == 400 and bad_k.json()["error"]["param"] == "k"
    missing = httpx.get(f"{server}/v1/nothing", timeout=TIMEOUT)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_with_an_api_key_every_endpoint_but_health_needs_it(runtime: Runtime):
    with running_server(runtime, api_key="s3cret") as (url, _):
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).status_code == 200
        for method, path in [("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/v1/chat/completions"),
                             ("POST", "/generate")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                response = httpx.request(method, f"{url}{path}", json={}, headers=headers, timeout=TIMEOUT)
                assert response.status_code == 401, (path, headers)
                assert response.json()["error"]["code"] == "invalid_api_key"
        good = openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="tiny-qwen2", messages=CHAT, max_tokens=2).choices


def test_health_is_503_while_the_models_load_and_requests_are_refused_cleanly():
    with running_server(None) as (url, state):
        health = httpx.get(f"{url}/health", timeout=TIMEOUT)
        assert health.status_code == 503 and health.json()["status"] == "loading"
        chat = httpx.post(f"{url}/v1/chat/completions", json={"model": "x", "messages": CHAT}, timeout=TIMEOUT)
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "model_not_ready"
        state.ready(tiny_runtime(settings=state.settings))
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).json()["status"] == "ok"


# ------------------------------------------------------------------ concurrency


def metric(server: str, name: str) -> float:
    text = httpx.get(f"{server}/metrics", timeout=TIMEOUT).text
    match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_a_client_that_disconnects_mid_stream_cancels_its_reply_and_the_next_starts_at_once():
    slow = tiny_runtime(delay=0.05)
    with running_server(slow) as (url, _):
        body = {"model": "tiny-qwen2", "messages": CHAT, "max_tokens": 200, "stream": True,
                "speculative": {"mode": "target"}}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT) as response:
            lines = response.iter_lines()
            for _ in range(6):
                next(lines)
        started = time.monotonic()
        after = httpx.post(f"{url}/generate", json={"messages": CHAT, "max_new_tokens": 3, "mode": "target"},
                           timeout=TIMEOUT)
        assert after.status_code == 200
        assert time.monotonic() - started < 5  # not the ~10 s the abandoned reply would have taken
        assert metric(url, 'specdec:request_success_total{finished_reason="abort"}') == 1
        assert metric(url, "specdec:generation_tokens_total") < 100


def test_a_full_queue_is_an_immediate_503_with_retry_after_and_a_long_wait_times_out():
    # The waiter must still be queued when the third request comes (2 s, against the ~0.1 s it takes to
    # see the waiter queued) and time out long before the running reply (120 passes of 0.05 s) ends.
    slow = tiny_runtime(delay=0.05)
    with running_server(slow, queue_size=1, request_timeout=2.0) as (url, _):
        long = {"model": "tiny-qwen2", "messages": CHAT, "max_tokens": 120, "speculative": {"mode": "target"}}
        results: dict[str, httpx.Response] = {}
        busy = threading.Thread(target=lambda: results.setdefault(
            "busy", httpx.post(f"{url}/v1/chat/completions", json=long, timeout=TIMEOUT)))
        busy.start()
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/health", timeout=TIMEOUT).json()["running"] == 0:
            assert time.monotonic() < deadline, "the first request never started"
            time.sleep(0.02)
        waiter = threading.Thread(target=lambda: results.setdefault(
            "waiter", httpx.post(f"{url}/v1/chat/completions", json=long, timeout=TIMEOUT)))
        waiter.start()
        while httpx.get(f"{url}/health", timeout=TIMEOUT).json()["waiting"] == 0:
            assert time.monotonic() < deadline and waiter.is_alive(), "the second request never queued"
            time.sleep(0.02)
        started = time.monotonic()
        full = httpx.post(f"{url}/v1/chat/completions", json=long, timeout=TIMEOUT)
        assert time.monotonic() - started < 1.0
        assert full.status_code == 503 and full.headers["retry-after"] == "2"
        assert full.json()["error"]["code"] == "queue_full"
        waiter.join(10)
        assert results["waiter"].status_code == 503 and results["waiter"].json()["error"]["code"] == "queue_timeout"
        busy.join(30)
        assert results["busy"].status_code == 200  # the running reply was never disturbed


def test_metrics_counters_add_up_to_the_per_request_figures(runtime: Runtime):
    with running_server(runtime) as (url, _):
        reports = []
        for mode, k in [("model", 3), ("hybrid", 4), ("target", 1), ("model", 2)]:
            response = httpx.post(f"{url}/generate", json={"messages": CHAT, "max_new_tokens": 12, "mode": mode,
                                                           "k": k, "adaptive_k": False}, timeout=TIMEOUT)
            reports.append(response.json()["speculative"])
        assert metric(url, "specdec:spec_decode_num_draft_tokens_total") == sum(r["draft_tokens"] for r in reports)
        assert metric(url, "specdec:spec_decode_num_accepted_tokens_total") == sum(
            r["accepted_tokens"] for r in reports)
        assert metric(url, "specdec:generation_tokens_total") == sum(r["completion_tokens"] for r in reports)
        assert metric(url, "specdec:prompt_tokens_total") == sum(r["prompt_tokens"] for r in reports)
        assert metric(url, "specdec:spec_decode_num_steps_total") == sum(r["steps"] for r in reports)
        assert metric(url, 'specdec:spec_decode_num_accepted_tokens_per_pos_total{position="0"}') == sum(
            sum(r["acceptance_histogram"][1:]) for r in reports)  # steps that kept their first draft
        assert metric(url, "specdec:e2e_request_latency_seconds_count") == 4
        assert metric(url, "specdec:num_requests_running") == 0


# ------------------------------------------------------------------ stop strings


@given(st.text(alphabet="ab\n", max_size=30), st.lists(st.integers(1, 5), max_size=10),
       st.lists(st.text(alphabet="ab\n", min_size=1, max_size=3), max_size=2))
def test_the_stop_filter_cuts_at_the_first_stop_string_however_the_text_arrives(text, cuts, stops):
    pieces, rest = [], text
    for cut in cuts:
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces.append(rest)
    stop = StopFilter(stops)
    out = "".join(stop.push(p) for p in pieces) + stop.flush()
    hits = [text.find(s) for s in stops if s in text]
    assert out == (text[: min(hits)] if hits else text)
    assert stop.stopped == bool(hits)


def test_the_stop_filter_waits_for_a_stop_that_starts_earlier_than_one_already_complete():
    stop = StopFilter(["abb", "b"])
    assert stop.push("ab") == ""  # "b" is complete, but "abb" starts earlier and may still come
    assert stop.push("b") == "" and stop.stopped
    held = StopFilter(["abc", "b"])
    assert held.push("xab") == "x"
    assert held.flush() == "a" and held.stopped  # the text ended: "abc" never came, "b" cuts


# ------------------------------------------------------------------ the load check


def test_the_load_check_reports_every_request_of_every_level(runtime: Runtime, capsys, tmp_path):
    with running_server(runtime) as (url, _):
        code = cli.main(["serve", "--url", url, "--concurrency", "1,3", "--requests", "4", "--max-tokens", "6",
                         "--out", str(tmp_path / "rows.jsonl")])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"^\| 1 \| 4 \| 0 \| 0 \| \d+ / \d+ \| \d+ / \d+ \| [\d.]+ \|", out, re.MULTILINE), out
    assert re.search(r"^\| 3 \| 4 \| 0 \| 0 \|", out, re.MULTILINE), out
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["status"] == 200 and r["tokens"] == 6 for r in rows)


def test_the_load_check_compares_servers_request_by_request_and_times_follow_up_turns(runtime: Runtime, capsys,
                                                                                       tmp_path):
    with running_server(runtime) as (first, _), running_server(tiny_runtime(delay=0.08)) as (slower, _):
        code = cli.main(["serve", "--url", first, "--url", slower, "--concurrency", "1", "--requests", "3",
                         "--max-tokens", "6", "--follow-up", "--out", str(tmp_path / "rows.jsonl")])
    out = capsys.readouterr().out
    assert code == 0, out
    paired = re.search(rf"^\| {re.escape(first)} \| 3 \| .* \| 1\.000x \| 1\.000x \|$", out, re.MULTILINE)
    assert paired, out
    slow_row = re.search(rf"^\| {re.escape(slower)} \| 3 \| .* \| ([\d.]+)x \| ([\d.]+)x \|$", out, re.MULTILINE)
    assert slow_row and float(slow_row.group(1)) > 1.0 and float(slow_row.group(2)) < 1.0, out
    assert re.search(rf"^\| {re.escape(first)}, 1 clients \| 3 \| \d+ / \d+ \| – \|$", out, re.MULTILINE), out
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["tokens"] == 6 and r["text"] for r in rows)


def test_the_load_check_counts_designed_503s_apart_from_errors(capsys):
    with running_server(tiny_runtime(delay=0.03), queue_size=0) as (url, _):
        code = cli.main(["serve", "--url", url, "--concurrency", "4", "--requests", "4", "--max-tokens", "20"])
    out = capsys.readouterr().out
    completed, errors, refused = (int(n) for n in re.search(r"^\| 4 \| (\d+) \| (\d+) \| (\d+) \|", out,
                                                             re.MULTILINE).groups())
    assert code == 0 and errors == 0 and refused >= 1 and completed + refused == 4


async def test_a_worker_that_stops_refuses_its_waiting_jobs_and_cancels_the_running_one():
    import asyncio

    from specdec_tui.server.worker import EngineWorker, Job, QueueTimeout

    slow = tiny_runtime(delay=0.05)
    worker = EngineWorker(lambda job: slow.generate(job.prompt_ids, job.params, job.mode, job.cancel), 4)
    loop = asyncio.get_running_loop()
    params = slow.params(max_new_tokens=200, adaptive_k=False)
    running, waiting = (Job(slow.prompt_ids(CHAT), params, "target", False, loop) for _ in range(2))
    worker.submit(running)
    worker.submit(waiting)
    await worker.wait_started(running, 5)
    await asyncio.to_thread(worker.stop)
    with pytest.raises(QueueTimeout, match="shutting down"):
        await worker.wait_started(waiting, 5)
    assert running.cancel.is_set() and not worker.thread.is_alive()
