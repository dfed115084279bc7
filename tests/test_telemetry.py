"""OpenTelemetry traces and metrics of replies, read back from in-memory exporters and a real server."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from serving import running_server, serving_settings, tiny_runtime
from tiny import tiny_pair

from specdec_tui.config import SettingsError, TelemetrySettings
from specdec_tui.engine.decoder import FinishedEvent, PromptTooLongError
from specdec_tui.observability.setup import Observers, observers_from_settings, telemetry_from_settings
from specdec_tui.observability.telemetry import Telemetry
from specdec_tui.runtime import Runtime

CHAT = [{"role": "user", "content": "def add(a, b):"}]


def in_memory(step_spans: bool = True) -> tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    return Telemetry(tracer_provider, MeterProvider(metric_readers=[metrics]), step_spans), spans, metrics


def traced_runtime(telemetry: Telemetry) -> Runtime:
    return Runtime.from_pair(serving_settings(), tiny_pair(), Observers(telemetry=telemetry))


def reply(runtime: Runtime, **params: object) -> FinishedEvent:
    finished = list(runtime.reply(CHAT, runtime.params(adaptive_k=False, **params), "hybrid", fresh=True,
                                  conversation_id="7"))[-1]
    assert isinstance(finished, FinishedEvent)
    return finished


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def metric_points(reader: InMemoryMetricReader) -> dict[str, list]:
    data = reader.get_metrics_data()
    return {m.name: list(m.data.data_points) for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics}


def test_a_reply_is_one_genai_span_with_a_step_span_tree_summing_to_it():
    telemetry, exporter, _ = in_memory()
    finished = reply(traced_runtime(telemetry), k=3, max_new_tokens=20, seed=5)
    spans = list(exporter.get_finished_spans())
    [root] = [s for s in spans if s.parent is None]
    assert root.name == "chat tiny-qwen2" and root.kind is SpanKind.INTERNAL
    a = root.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "specdec-tui"
    assert (a["gen_ai.request.model"], a["specdec.draft.model"]) == ("tiny-qwen2", "tiny-qwen2-draft")
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.seed"], a["gen_ai.request.temperature"]) == (20, 5, 0.0)
    assert (a["specdec.mode"], a["specdec.k"], a["specdec.tau"]) == ("hybrid", 3, 1.0)
    assert a["gen_ai.conversation.id"] == "7"
    summary = finished.summary
    assert a["gen_ai.response.finish_reasons"] == (summary.finish_reason,)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (summary.prompt_tokens, 20)
    assert (a["specdec.steps"], a["specdec.drafted"], a["specdec.accepted"]) == (
        summary.steps, summary.drafted, summary.accepted)
    assert a["specdec.acceptance_rate"] == pytest.approx(summary.acceptance_rate)
    assert a["specdec.mean_acceptance_length"] == pytest.approx(1 + summary.mean_accepted)
    top = children(spans, root)  # the prompt's pass, which gave the first token, then the later steps
    assert [s.name for s in top] == ["prefill"] + ["decode_step"] * (summary.steps - 1)
    steps = top[1:]
    assert sum(s.attributes["specdec.drafted"] for s in top) == summary.drafted
    assert sum(s.attributes["specdec.accepted"] for s in top) == summary.accepted
    assert sum(s.attributes["specdec.emitted"] for s in top) == 20 and top[0].attributes["specdec.emitted"] >= 1
    assert all(s.attributes["specdec.rows_verified"] == s.attributes["specdec.drafted"] + 1 for s in top)
    for step in steps:
        parts = children(spans, step)
        assert [p.name for p in parts] == ["draft_infer", "target_infer", "acceptance_check"]
        assert step.start_time == parts[0].start_time and parts[-1].end_time == step.end_time
        assert all(p.end_time <= q.start_time + 1 for p, q in itertools.pairwise(parts))
    assert root.start_time <= top[0].start_time and steps[-1].end_time <= root.end_time
    assert all(s.start_time >= prev.end_time - 2_000_000 for prev, s in itertools.pairwise(steps))


def test_metrics_match_the_run_summary():
    telemetry, _, reader = in_memory()
    runtime = traced_runtime(telemetry)
    first, second = reply(runtime, k=2, max_new_tokens=12), reply(runtime, k=4, max_new_tokens=9)
    points = metric_points(reader)
    usage = {p.attributes["gen_ai.token.type"]: p.sum for p in points["gen_ai.client.token.usage"]}
    assert usage == {"input": first.summary.prompt_tokens * 2, "output": 21}
    assert points["specdec.draft.tokens"][0].value == first.summary.drafted + second.summary.drafted
    assert points["specdec.accepted.tokens"][0].value == first.summary.accepted + second.summary.accepted
    assert points["specdec.steps"][0].value == first.summary.steps + second.summary.steps
    [ttft] = points["gen_ai.server.time_to_first_token"]
    assert ttft.count == 2 and ttft.sum == pytest.approx(first.summary.ttft_s + second.summary.ttft_s)
    assert points["gen_ai.server.time_to_first_token"][0].attributes["specdec.mode"] == "hybrid"
    assert points["gen_ai.client.operation.duration"][0].count == 2
    assert points["gen_ai.server.time_per_output_token"][0].count == 2


def test_step_spans_can_be_switched_off():
    telemetry, exporter, _ = in_memory(step_spans=False)
    reply(traced_runtime(telemetry), k=3, max_new_tokens=10)
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["chat tiny-qwen2", "prefill"]


def test_a_failing_reply_sets_error_type_and_the_span_status():
    telemetry, exporter, _ = in_memory()
    runtime = traced_runtime(telemetry)
    with pytest.raises(PromptTooLongError):
        list(runtime.generate([5] * 300, runtime.params(), "hybrid"))
    [span] = exporter.get_finished_spans()
    assert span.attributes["error.type"] == "PromptTooLongError"
    assert span.status.status_code is StatusCode.ERROR and "context holds 256" in span.status.description


def test_telemetry_is_off_by_default_and_nothing_of_it_is_imported():
    settings = serving_settings()
    assert observers_from_settings(settings).listeners == []
    code = textwrap.dedent("""
        import sys
        from specdec_tui.config import load_settings
        from specdec_tui.observability.setup import observers_from_settings
        import specdec_tui.runtime, specdec_tui.server.app
        assert observers_from_settings(load_settings()[0]).listeners == []
        # FastAPI itself imports the OpenTelemetry API when it is installed; the SDK, exporters,
        # instrumentation and MLflow are ours to import, and only when switched on.
        ours = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation", "mlflow")
        print(sorted(m for m in sys.modules if m.startswith(ours)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_turning_telemetry_on_without_its_extra_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if the extra were not installed
    with pytest.raises(SettingsError, match=r"telemetry.enabled needs the telemetry extra: pip install "
                                            r"'specdec-tui\[telemetry\]'"):
        telemetry_from_settings(TelemetrySettings(enabled=True))


def test_an_unreachable_collector_neither_breaks_nor_slows_a_reply(caplog):
    telemetry = telemetry_from_settings(TelemetrySettings(enabled=True, endpoint="http://127.0.0.1:9"))
    runtime = traced_runtime(telemetry)
    finished = reply(runtime, k=3, max_new_tokens=12)
    assert len(finished.token_ids) == 12
    telemetry.tracer_provider.force_flush(15_000)
    reply(runtime, k=3, max_new_tokens=4)
    telemetry.tracer_provider.force_flush(15_000)
    warnings = [r for r in caplog.records if "cannot export spans" in r.getMessage()]
    assert len(warnings) == 1
    telemetry.shutdown()


def test_the_server_nests_the_reply_span_under_the_request_span():
    telemetry, exporter, _ = in_memory()
    runtime = tiny_runtime(observers=Observers(telemetry=telemetry))
    with running_server(runtime) as (url, _):
        response = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
            "model": "tiny-qwen2", "messages": CHAT, "max_tokens": 6, "stream": True})
        assert response.status_code == 200
    spans = list(exporter.get_finished_spans())
    [request] = [s for s in spans if s.name == "POST /v1/chat/completions"]
    [chat] = [s for s in spans if s.name == "chat tiny-qwen2"]
    assert chat.parent is not None and chat.parent.span_id == request.context.span_id
    assert chat.context.trace_id == request.context.trace_id
    assert request.kind is SpanKind.SERVER


def test_a_reply_a_failing_model_changed_says_so_on_its_span():
    from specdec_tui.engine.metrics import summarize
    from specdec_tui.observability.telemetry import response_attributes

    clean = summarize([], mode="model", prompt_tokens=3, seconds=1.0, ttft_s=0.1, finish_reason="eos")
    assert "specdec.failure" not in response_attributes(clean)
    hurt = summarize([], mode="model", prompt_tokens=3, seconds=1.0, ttft_s=0.1, finish_reason="eos",
                     target_failures=3, failure="the target model failed 3 passes in a row")
    attributes = response_attributes(hurt)
    assert attributes["specdec.target_failures"] == 3
    assert attributes["specdec.failure"] == "the target model failed 3 passes in a row"
