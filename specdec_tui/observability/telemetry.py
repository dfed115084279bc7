"""OpenTelemetry traces and metrics of replies, as a listener on the engine's event stream.

One span per reply, named and attributed by the GenAI semantic conventions (``chat {model}``,
kind INTERNAL: the model runs in this process), with ``specdec.*`` attributes for what
speculation did. Under it a ``prefill`` span (from the start to the first step) and, unless
switched off, one ``decode_step`` span per step with ``draft_infer``, ``target_infer`` and
``acceptance_check`` children. Step spans are placed from the engine's own timings: each step
ends when its event arrives and lasts what its record says.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import Meter, MeterProvider
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from specdec_tui.engine.decoder import Event, FinishedEvent, StepEvent
from specdec_tui.engine.metrics import RunSummary, StepRecord
from specdec_tui.observability.events import ReplyInfo

PROVIDER = "specdec-tui"
SCOPE = "specdec_tui"
#: Token counts per request, as the GenAI conventions suggest.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


def step_attributes(record: StepRecord) -> dict[str, int]:
    return {"specdec.drafted": record.drafted, "specdec.accepted": record.accepted, "specdec.emitted": record.emitted,
            "specdec.rows_verified": record.drafted + 1}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class Telemetry:
    """Traces and measures every reply it is given; providers are passed in, never set globally."""

    def __init__(self, tracer_provider: TracerProvider, meter_provider: MeterProvider,
                 step_spans: bool = True) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = tracer_provider.get_tracer(SCOPE)
        self.step_spans = step_spans
        meter: Meter = meter_provider.get_meter(SCOPE)
        self.ttft = meter.create_histogram("gen_ai.server.time_to_first_token", unit="s",
                                           description="Time to generate the first token",
                                           explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.per_token = meter.create_histogram("gen_ai.server.time_per_output_token", unit="s",
                                                description="Time per output token after the first",
                                                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s",
                                               description="Duration of the whole reply",
                                               explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                             description="Input and output tokens per reply",
                                             explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.drafted = meter.create_counter("specdec.draft.tokens", unit="{token}", description="Tokens drafted")
        self.accepted = meter.create_counter("specdec.accepted.tokens", unit="{token}",
                                             description="Drafted tokens the target accepted")
        self.steps = meter.create_counter("specdec.steps", unit="{step}", description="Target verify passes")

    def current_context(self) -> otel_context.Context:
        """The active trace context, to nest a reply started elsewhere (another thread) under it."""
        return otel_context.get_current()

    def __call__(self, events: Iterator[Event], reply: ReplyInfo) -> Iterator[Event]:
        parent = reply.parent if isinstance(reply.parent, otel_context.Context) else None
        started = time.time()
        span = self.tracer.start_span(f"{reply.operation} {reply.target}", context=parent, kind=SpanKind.INTERNAL,
                                      attributes=request_attributes(reply), start_time=_ns(started))
        inside = trace.set_span_in_context(span, parent)
        finished = False
        try:
            for event in events:
                if isinstance(event, StepEvent):
                    if event.record.prompt:
                        self._prefill(inside, event.record, started, time.time())
                    elif self.step_spans:
                        self._step(inside, event.record, time.time())
                elif isinstance(event, FinishedEvent):
                    finished = True
                    self._finish(span, reply, event.summary)
                yield event
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.record_exception(exc)
            raise
        finally:
            if not finished and span.is_recording():
                span.set_attribute("gen_ai.response.finish_reasons", ["cancelled"])
            span.end()

    def _prefill(self, parent: otel_context.Context, record: StepRecord, start: float, end: float) -> None:
        """The reply's first step: the target's pass over the prompt, which gave the first token."""
        span = self.tracer.start_span("prefill", context=parent, start_time=_ns(start), attributes=step_attributes(record))
        span.end(end_time=_ns(max(end, start)))

    def _step(self, parent: otel_context.Context, record: StepRecord, end: float) -> None:
        start = end - record.seconds
        span = self.tracer.start_span("decode_step", context=parent, start_time=_ns(start),
                                      attributes=step_attributes(record))
        inside = trace.set_span_in_context(span, parent)
        target_end = start + record.draft_s + record.verify_s - record.accept_s
        for name, begin, stop in (
            ("draft_infer", start, start + record.draft_s),
            ("target_infer", start + record.draft_s, target_end),
            ("acceptance_check", target_end, end),
        ):
            child = self.tracer.start_span(name, context=inside, start_time=_ns(begin))
            child.end(end_time=_ns(stop))
        span.end(end_time=_ns(end))

    def _finish(self, span: trace.Span, reply: ReplyInfo, summary: RunSummary) -> None:
        span.set_attributes(response_attributes(summary))
        attributes = metric_attributes(reply, summary)
        if summary.new_tokens:
            self.ttft.record(summary.ttft_s, attributes)
        if summary.new_tokens > 1:
            self.per_token.record((summary.seconds - summary.ttft_s) / (summary.new_tokens - 1), attributes)
        self.duration.record(summary.seconds, attributes)
        self.tokens.record(summary.prompt_tokens, {**attributes, "gen_ai.token.type": "input"})
        self.tokens.record(summary.new_tokens, {**attributes, "gen_ai.token.type": "output"})
        self.drafted.add(summary.drafted, attributes)
        self.accepted.add(summary.accepted, attributes)
        self.steps.add(summary.steps, attributes)

    def shutdown(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            stop = getattr(provider, "shutdown", None)
            if stop is not None:
                stop()


def request_attributes(reply: ReplyInfo) -> dict[str, Any]:
    params = reply.params
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": reply.operation,
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": reply.target,
        "gen_ai.request.max_tokens": params.max_new_tokens,
        "gen_ai.request.temperature": params.temperature,
        "gen_ai.request.top_p": params.top_p,
        "specdec.mode": reply.mode,
        "specdec.k": params.k,
        "specdec.tau": params.tau,
        "specdec.adaptive_k": params.adaptive_k,
        "specdec.lookup_k": params.lookup_k,
        "specdec.draft.model": reply.draft or "",
    }
    if params.seed is not None:
        attributes["gen_ai.request.seed"] = params.seed
    if reply.conversation_id is not None:
        attributes["gen_ai.conversation.id"] = reply.conversation_id
    return attributes


def response_attributes(summary: RunSummary) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.response.finish_reasons": [summary.finish_reason],
        "gen_ai.usage.input_tokens": summary.prompt_tokens,
        "gen_ai.usage.output_tokens": summary.new_tokens,
        "specdec.steps": summary.steps,
        "specdec.drafted": summary.drafted,
        "specdec.accepted": summary.accepted,
        "specdec.mean_acceptance_length": 1 + summary.mean_accepted,
        "specdec.time_to_first_token_s": summary.ttft_s,
        "specdec.tokens_per_s": summary.tokens_per_s,
    }
    if summary.acceptance_rate is not None:
        attributes["specdec.acceptance_rate"] = summary.acceptance_rate
    if summary.failure:  # a model failed: say how much of the reply it changed, and why
        attributes.update({"specdec.degraded_tokens": summary.degraded_tokens,
                           "specdec.target_failures": summary.target_failures,
                           "specdec.draft_failures": summary.draft_failures, "specdec.failure": summary.failure})
    return attributes


def metric_attributes(reply: ReplyInfo, summary: RunSummary) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": reply.operation,
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": reply.target,
        "specdec.mode": summary.mode,
        "specdec.draft.model": reply.draft or "",
    }
