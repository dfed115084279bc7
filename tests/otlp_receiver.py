"""A real OTLP/HTTP receiver on loopback: decodes the protobuf export requests the SDK's exporter sends."""

from __future__ import annotations

import contextlib
import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    #: The exporting process (its ``process.pid`` resource attribute).
    pid: int | None


class Received:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()

    def add(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value for a in resource_spans.resource.attributes}
                pid = attributes["process.pid"].int_value if "process.pid" in attributes else None
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(ReceivedSpan(span.name, span.trace_id.hex(), span.span_id.hex(),
                                                       span.parent_span_id.hex(), span.kind, pid))

    def snapshot(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """Receives traces at ``{endpoint}/v1/traces`` (and accepts metrics); yields (endpoint, received)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                received.add(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
            else:
                reply = b""
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
