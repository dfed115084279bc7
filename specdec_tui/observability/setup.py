"""Building the listeners the settings ask for. OpenTelemetry and MLflow are imported only here,
and only when their setting is on; without their extra, turning one on is a one-line error."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdec_tui.config import Settings, SettingsError, TelemetrySettings
from specdec_tui.observability.events import ReplyListener

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from specdec_tui.observability.telemetry import Telemetry
    from specdec_tui.observability.tracking import ReplyTracker

log = logging.getLogger("specdec_tui.observability")
DEFAULT_OTLP_ENDPOINT = "http://localhost:4318"
#: Seconds one export may take; it runs in the exporter's own thread, never in a reply's.
EXPORT_TIMEOUT_S = 5


class MissingExtra(SettingsError):
    """A feature was turned on without the optional packages it needs."""


def require(extra: str, setting: str, module: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        raise MissingExtra(f"{setting} needs the {extra} extra: pip install 'specdec-tui[{extra}]' "
                           f"({exc})") from None


@dataclass
class Observers:
    """The listeners a front end's replies go through, and their shutdown."""

    telemetry: Telemetry | None = None
    tracker: ReplyTracker | None = None

    @property
    def listeners(self) -> Sequence[ReplyListener]:
        return [listener for listener in (self.telemetry, self.tracker) if listener is not None]

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()
        if self.telemetry is not None:
            self.telemetry.shutdown()


def observers_from_settings(settings: Settings) -> Observers:
    telemetry = telemetry_from_settings(settings.telemetry) if settings.telemetry.enabled else None
    tracker = None
    if settings.tracking.mlflow_uri is not None:
        require("tracking", "tracking.mlflow_uri", "mlflow")
        from specdec_tui.observability.tracking import ReplyTracker, model_versions, resolve_tracking_uri

        tracker = ReplyTracker(resolve_tracking_uri(settings.tracking.mlflow_uri), settings.tracking.experiment,
                               model_versions(settings.models.target, settings.models.draft))
    return Observers(telemetry, tracker)


class ReportingExporter:
    """Passes spans on to ``inner``; the first failed export is logged, later ones are not."""

    def __init__(self, inner: SpanExporter, where: str) -> None:
        self.inner, self.where = inner, where
        self.failed = False

    def export(self, spans):  # type: ignore[no-untyped-def]
        result = self.inner.export(spans)
        if result.name != "SUCCESS" and not self.failed:
            self.failed = True
            log.warning("telemetry: cannot export spans to %s; spans are dropped until it answers "
                        "(this is logged once)", self.where)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class DiscardingExporter:
    def export(self, spans):  # type: ignore[no-untyped-def]
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def telemetry_from_settings(settings: TelemetrySettings) -> Telemetry:
    require("telemetry", "telemetry.enabled", "opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from specdec_tui.observability.telemetry import Telemetry

    # OTEL_SERVICE_NAME (and OTEL_RESOURCE_ATTRIBUTES) win over the setting, as OpenTelemetry users expect.
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": settings.service_name}
    resource = Resource.create(named)
    tracer_provider = TracerProvider(resource=resource)
    readers = []
    if settings.exporter == "otlp":
        require("telemetry", "telemetry.exporter = 'otlp'", "opentelemetry.exporter.otlp.proto.http")
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # Without an endpoint setting the exporters read OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT
        # themselves (default http://localhost:4318); headers come from OTEL_EXPORTER_OTLP_*HEADERS.
        base = settings.endpoint.rstrip("/") if settings.endpoint else None
        where = base or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP_ENDPOINT
        # The exporter's own per-failure messages would repeat for every batch; ours says it once.
        logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.CRITICAL)
        spans = ReportingExporter(OTLPSpanExporter(endpoint=f"{base}/v1/traces" if base else None,
                                                   timeout=EXPORT_TIMEOUT_S), where)
        tracer_provider.add_span_processor(BatchSpanProcessor(
            spans, max_queue_size=2048, export_timeout_millis=1000 * EXPORT_TIMEOUT_S))  # type: ignore[arg-type]
        readers.append(PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None, timeout=EXPORT_TIMEOUT_S),
            export_timeout_millis=1000 * EXPORT_TIMEOUT_S))
    elif settings.exporter == "console":
        tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    else:
        # "none": spans are made and batched as for a real exporter, then dropped (what tracing costs
        # in this process, without a network).
        tracer_provider.add_span_processor(BatchSpanProcessor(DiscardingExporter()))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    return Telemetry(tracer_provider, meter_provider, settings.step_spans)
