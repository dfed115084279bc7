"""MLflow runs of the bench and of replies, read back through MlflowClient; spans over OTLP to a real
MLflow server; the telemetry overhead A/B in the bench."""

from __future__ import annotations

import contextlib
import csv
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from mlflow.tracking import MlflowClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from serving import free_port, serving_settings
from tiny import tiny_pair

from specdec_tui.bench.harness import BenchPlan, run_suite, write_csv
from specdec_tui.bench.report import summarize_rows
from specdec_tui.bench.suite import BenchPrompt
from specdec_tui.bench.tracking import bench_log
from specdec_tui.config import TelemetrySettings, load_settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.models import quantized_kernels
from specdec_tui.observability.setup import Observers, telemetry_from_settings
from specdec_tui.observability.telemetry import Telemetry
from specdec_tui.observability.tracking import PARENT_TAG, ReplyTracker, log_bench
from specdec_tui.runtime import Runtime

PROMPTS = [
    BenchPrompt("add", "code", ({"role": "user", "content": "def add(a, b):"},)),
    BenchPrompt("fox", "prose", ({"role": "user", "content": "The quick brown fox"},)),
]
CHAT = [{"role": "user", "content": "def add(a, b):"}]


def runtime(observers: Observers | None = None) -> Runtime:
    return Runtime.from_pair(serving_settings(), tiny_pair(), observers)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_bench_run_and_its_sweep_are_read_back_from_a_sqlite_store(tmp_path: Path):
    plan = BenchPlan(modes=["target", "speculative", "hybrid", "hybrid+telemetry"], ks=[2, 3], taus=[1.0],
                     max_new_tokens=8, adaptive_k=False)
    bench_runtime = runtime()
    traced = replace(bench_runtime, observers=Observers(telemetry=Telemetry(TracerProvider(), MeterProvider())))
    rows = run_suite(bench_runtime, PROMPTS, plan, traced=traced)
    out = tmp_path / "rows.csv"
    write_csv(rows, out)
    lines = summarize_rows(rows)
    settings, origins = load_settings()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_bench(uri, bench_log(rows, lines, plan, settings, origins, out, None, "specdec-bench --ks 2,3", None))
    assert run_id is not None
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    params = run.data.params
    assert (params["modes"], params["ks"], params["taus"], params["new_tokens"]) == (
        "target,speculative,hybrid,hybrid+telemetry", "2,3", "1", "8")
    assert params["target_version"].startswith("sha256:") and params["precision"] == settings.models.precision
    assert params["prompt_count"] == "2" and params["package_version"]
    # which products ran: their instruction set, since a VNNI host and an AVX2 one differ in speed
    assert params["kernels"] == (f"specdec ({quantized_kernels.instruction_set()})" if quantized_kernels.available()
                                 else "fbgemm")
    metrics = run.data.metrics
    for row in read_csv(out):  # one prompt per category: each median is that prompt's own row
        mode = row["mode"].replace("+", "_")  # MLflow allows no "+" in a metric name
        key = f"{row['category']}/{mode}" + (f"/k{row['k']}_tau1" if row["k"] != "0" else "")
        assert metrics[f"{key}/median_tokens_per_s"] == pytest.approx(float(row["tokens_per_s"]))
        assert metrics[f"{key}/identical_share"] == (row["identical_to_target"] == "True")
    for line in lines:
        key = f"{line.category}/{line.mode.replace('+', '_')}" + (f"/k{line.k}_tau{line.tau:g}" if line.k else "")
        assert metrics[f"{key}/speedup_vs_target"] == pytest.approx(line.median_speedup)
    assert metrics["code/hybrid_telemetry/k2_tau1/paired_over_target"] > 0
    target_speed = next(float(r["tokens_per_s"]) for r in read_csv(out) if (r["category"], r["mode"]) == (
        "code", "target"))
    for k in (2, 3):
        speed = next(float(r["tokens_per_s"]) for r in read_csv(out)
                     if (r["category"], r["mode"], r["k"]) == ("code", "speculative", str(k)))
        assert metrics[f"code/speculative/k{k}_tau1/paired_over_target"] == pytest.approx(speed / target_speed,
                                                                                          rel=1e-3)
    assert metrics["peak_memory_mb"] > 0
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert artifacts == {"rows.csv", "settings.txt"}
    local = client.download_artifacts(run_id, "rows.csv", str(tmp_path / "back"))
    assert Path(local).read_text() == out.read_text()
    children = client.search_runs([run.info.experiment_id], f"tags.`{PARENT_TAG}` = '{run_id}'")
    assert sorted(c.data.params["k"] for c in children) == ["2", "3"]
    child = next(c for c in children if c.data.params["k"] == "3")
    assert child.data.metrics["code/hybrid/k3_tau1/median_tokens_per_s"] == pytest.approx(
        next(line.median_tokens_per_s for line in lines if (line.category, line.mode, line.k) == ("code", "hybrid", 3)))


def test_every_chat_reply_is_logged_in_the_background(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'chat.db'}"
    tracker = ReplyTracker(uri, "specdec-chat", {"target_version": "tiny"})
    chat = runtime(Observers(tracker=tracker))
    replies = []
    for k in (2, 4):
        finished = list(chat.reply(CHAT, chat.params(k=k, max_new_tokens=10, adaptive_k=False), "hybrid",
                                   conversation_id="3"))[-1]
        assert isinstance(finished, FinishedEvent)
        replies.append(finished)
    tracker.close()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("specdec-chat")
    runs = sorted(client.search_runs([experiment.experiment_id]), key=lambda r: r.data.params["k"])
    assert [r.data.params["k"] for r in runs] == ["2", "4"]
    for run, finished in zip(runs, replies, strict=True):
        assert run.data.params["mode"] == "hybrid" and run.data.params["target"] == "tiny-qwen2"
        assert run.data.params["target_version"] == "tiny"
        assert run.data.metrics["new_tokens"] == 10
        assert run.data.metrics["accepted"] == finished.summary.accepted
        assert run.data.tags["gen_ai.conversation.id"] == "3"
        text = Path(client.download_artifacts(run.info.run_id, "reply.txt", str(tmp_path / run.info.run_id)))
        assert text.read_text() == finished.text
        prompt = Path(client.download_artifacts(run.info.run_id, "prompt.json", str(tmp_path / run.info.run_id)))
        assert "def add(a, b):" in prompt.read_text()


def test_an_unreachable_tracking_server_warns_once_and_loses_nothing(tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    caplog.set_level(logging.WARNING, logger="specdec_tui.observability")
    tracker = ReplyTracker("http://127.0.0.1:9", "specdec-chat")
    chat = runtime(Observers(tracker=tracker))
    for _ in range(3):
        finished = list(chat.reply(CHAT, chat.params(max_new_tokens=6), "hybrid"))[-1]
        assert isinstance(finished, FinishedEvent) and len(finished.token_ids) == 6
    tracker.close()
    assert tracker.logged == 0
    assert len([r for r in caplog.records if "could not log a reply" in r.getMessage()]) == 1
    plan = BenchPlan(modes=["target"], ks=[2], taus=[1.0], max_new_tokens=4)
    rows = run_suite(runtime(), PROMPTS[:1], plan)
    out = tmp_path / "rows.csv"
    write_csv(rows, out)
    settings, origins = load_settings()
    logged = bench_log(rows, summarize_rows(rows), plan, settings, origins, out, None, "specdec-bench", None)
    assert log_bench("http://127.0.0.1:9", logged) is None
    assert any("could not log the bench run" in r.getMessage() for r in caplog.records)
    assert read_csv(out)  # the rows are still on disk


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    """A real MLflow tracking server on loopback (SQLite store), stopped on exit."""
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
               "--default-artifact-root", (folder / "artifacts").as_uri(), "--workers", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, "the MLflow server exited"
            assert time.monotonic() < deadline, "the MLflow server did not start"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def test_spans_arrive_over_otlp_at_a_real_mlflow_server(tmp_path: Path, monkeypatch):
    with mlflow_server(tmp_path) as url:
        client = MlflowClient(tracking_uri=url)
        experiment = client.create_experiment("specdec-otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"x-mlflow-experiment-id={experiment}")
        telemetry = telemetry_from_settings(TelemetrySettings(enabled=True, endpoint=url))
        traced = runtime(Observers(telemetry=telemetry))
        finished = list(traced.reply(CHAT, traced.params(k=3, max_new_tokens=8, adaptive_k=False), "hybrid"))[-1]
        assert isinstance(finished, FinishedEvent)
        assert telemetry.tracer_provider.force_flush(30_000)
        deadline = time.monotonic() + 30
        while not (traces := client.search_traces(locations=[experiment])):
            assert time.monotonic() < deadline, "no trace reached the server"
            time.sleep(0.5)
        telemetry.shutdown()
    [trace] = traces
    names = [span.name for span in trace.data.spans]
    assert "chat tiny-qwen2" in names and "prefill" in names
    # the first step is the prompt's pass, the prefill span; each later one a decode step with its parts
    assert names.count("decode_step") == finished.summary.steps - 1
    assert names.count("acceptance_check") == finished.summary.steps - 1
    root = next(span for span in trace.data.spans if span.name == "chat tiny-qwen2")
    assert root.attributes["gen_ai.usage.output_tokens"] == 8


def test_the_bench_runs_each_mode_with_and_without_telemetry_interleaved():
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    plain = runtime()
    traced = replace(plain, observers=Observers(telemetry=Telemetry(provider, MeterProvider())))
    plan = BenchPlan(modes=["target", "hybrid", "hybrid+telemetry", "target+telemetry"], ks=[3], taus=[1.0],
                     max_new_tokens=8, adaptive_k=False)
    rows = run_suite(plain, PROMPTS, plan, traced=traced)
    assert [r.mode for r in rows[:4]] == ["target", "hybrid", "hybrid+telemetry", "target+telemetry"]
    assert all(r.identical_to_target for r in rows)
    assert [r.k for r in rows if r.mode == "target+telemetry"] == [0, 0]  # one run per prompt, like target
    replies = [s for s in spans.get_finished_spans() if s.name == "chat tiny-qwen2"]
    assert len(replies) == 4  # only the traced half: 2 prompts x 2 traced modes
    assert sorted(s.attributes["specdec.mode"] for s in replies) == ["hybrid", "hybrid", "target", "target"]
