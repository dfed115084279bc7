"""The front deployment: the one HTTP endpoint, forwarding each request to an engine replica.

It holds no model. A request goes whole to the replica the router picks (the conversation's, see
``routing``), and its response comes back as the replica's app wrote it. A replica that dies
before the response started is retried on another; one that dies mid-stream ends the stream with
an error event, as a failed reply does on the single server. ``/health`` and ``/metrics`` are
answered here, from what the replicas post on the board.
"""


import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CollectorRegistry, Counter, generate_latest
from ray import serve
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from specdec_tui.config import Settings
from specdec_tui.scaleout import REPLICA_HEADER
from specdec_tui.scaleout.asgi import HTTPCall, ResponseBody, ResponseStart
from specdec_tui.scaleout.board import Notice, open_board
from specdec_tui.scaleout.merged_metrics import merge_expositions
from specdec_tui.scaleout.routing import affinity_key
from specdec_tui.server.app import BEARER, RETRY_AFTER_S, APIError, add_error_handlers, check_api_key
from specdec_tui.server.schema import ErrorBody

#: Times a request whose replica died before answering is sent to another.
RETRIES = 2
#: Response headers the front sets itself.
HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "date", "server"})
LOST = (ActorDiedError, ActorUnavailableError, RayActorError)

front = FastAPI(title="specdec-serve on Ray", version="0.1.0",
                summary="OpenAI-compatible speculative decoding, on engine replicas behind one endpoint")
add_error_handlers(front)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


class ReplicaLost(Exception):
    """The replica serving a request died (or became unreachable)."""


class FrontMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.routed = Counter("specdec:ray_requests_routed", "Requests each replica answered", ["replica"], registry=r)
        self.retried = Counter("specdec:ray_requests_retried",
                               "Requests sent to another replica because theirs died before answering", registry=r)
        self.lost = Counter("specdec:ray_replica_lost", "Requests whose replica died under them",
                            ["phase"], registry=r)
        self.rejected = Counter("specdec:ray_requests_rejected", "Requests refused by the front", ["reason"],
                                registry=r)


def replica_lost_event(exc: BaseException) -> bytes:
    body = ErrorBody(message=f"the replica serving this reply died: {type(exc).__name__}", type="server_error",
                     code="replica_lost")
    return f"data: {json.dumps({'error': body.model_dump()})}\n\ndata: [DONE]\n\n".encode()


def forwarded_headers(request: Request) -> tuple[tuple[str, str], ...]:
    headers = {key: value for key, value in request.headers.items() if key != "content-length"}
    try:  # the replica's spans join the front's trace
        from opentelemetry import propagate

        propagate.inject(headers)
    except ImportError:
        pass
    return tuple(headers.items())


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000, graceful_shutdown_timeout_s=5)
@serve.ingress(front)
class Frontend:
    def __init__(self, engine: DeploymentHandle, settings: Settings, app_name: str) -> None:
        self.engine = engine.options(stream=True)
        self.settings = settings
        self.board = open_board(app_name)
        self.metrics = FrontMetrics()
        self.telemetry = None
        if settings.telemetry.enabled:
            from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

            from specdec_tui.observability.setup import telemetry_from_settings

            self.telemetry = telemetry_from_settings(settings.telemetry)
            FastAPIInstrumentor.instrument_app(front, tracer_provider=self.telemetry.tracer_provider,
                                               meter_provider=self.telemetry.meter_provider,
                                               exclude_spans=["receive", "send"])

    # ---------------------------------------------------------------- answered here

    async def notices(self) -> list[Notice]:
        return await self.board.current.remote()

    @front.get("/health")
    async def health(self) -> JSONResponse:
        notices = await self.notices()
        ready = [n for n in notices if n.ready]
        rs = self.settings.ray
        expected = rs.replicas if isinstance(rs.replicas, int) else rs.min_replicas
        degraded = {n.replica: n.health["degraded"] for n in ready if n.health.get("status") == "degraded"}
        status = ("unavailable" if not ready else "degraded" if len(ready) < expected or degraded else "ok")
        body: dict[str, Any] = {
            "status": status,
            "model": ready[0].health["model"] if ready else self.settings.models.target,
            "draft": ready[0].health["draft"] if ready else self.settings.models.draft,
            "replicas": {
                "expected": rs.replicas if isinstance(rs.replicas, int)
                else {"min": rs.min_replicas, "max": rs.max_replicas},
                "ready": len(ready),
                "capacity": len(ready) * rs.max_ongoing_requests,
                "running": sum(n.health.get("running", 0) for n in ready),
                "waiting": sum(n.health.get("waiting", 0) for n in ready),
            },
            "per_replica": {n.replica: n.health for n in notices},
        }
        if degraded:
            body["degraded"] = degraded
        return JSONResponse(body, status_code=200 if ready else 503)

    async def exposition(self, per_replica: bool) -> Response:
        notices = await self.notices()
        text = merge_expositions({n.replica: n.metrics for n in notices}, per_replica)
        return Response(text.encode() + generate_latest(self.metrics.registry),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @front.get("/metrics")
    async def merged_metrics(self, credentials: Credentials) -> Response:
        """Every replica's metrics summed, as one server's, and the front's own."""
        check_api_key(self.settings.server.api_key, credentials)
        return await self.exposition(per_replica=False)

    @front.get("/metrics/replicas")
    async def replica_metrics(self, credentials: Credentials) -> Response:
        """Each replica's metrics with a ``replica`` label, and the front's own."""
        check_api_key(self.settings.server.api_key, credentials)
        return await self.exposition(per_replica=True)

    # ---------------------------------------------------------------- forwarded

    @front.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def forward(self, request: Request, path: str) -> Response:
        body = await request.body()
        client = (request.client.host, request.client.port) if request.client else ("127.0.0.1", 0)
        call = HTTPCall(request.method, request.url.path, request.url.query, forwarded_headers(request), body, client)
        key = affinity_key(call.path, body) if self.settings.ray.affinity else None
        for attempt in range(RETRIES + 1):
            stream = self.engine.handle.remote(call, affinity=key)
            try:
                replica, start = await self.opening(stream)
                if (start.header("content-type") or "").startswith("text/event-stream"):
                    return self.streamed(stream, replica, start)
                return Response(await self.whole_body(stream), start.status, self.response_headers(start, replica))
            except ReplicaLost:
                stream.cancel()
                self.metrics.lost.labels(phase="before_response").inc()
                if attempt == RETRIES:
                    raise APIError(503, "every replica tried for this request died before answering; retry "
                                        "shortly", type="server_error", code="replica_lost",
                                   headers={"Retry-After": str(RETRY_AFTER_S)}) from None
                self.metrics.retried.inc()
            except BaseException:
                stream.cancel()
                raise
        raise AssertionError("unreachable")

    async def opening(self, stream: DeploymentResponseGenerator) -> tuple[str, ResponseStart]:
        """The replica's id and the response's start, refusing a request that waits too long for one."""
        timeout = self.settings.server.request_timeout
        try:
            replica = await asyncio.wait_for(anext(stream), timeout)
        except TimeoutError:
            self.metrics.rejected.labels(reason="queue_timeout").inc()
            raise APIError(503, f"the request waited {timeout:g} s for a replica without starting; retry later",
                           type="server_error", code="queue_timeout",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except BackPressureError:
            self.metrics.rejected.labels(reason="queue_full").inc()
            raise APIError(503, "the server is busy: every replica is taken and the queue is full; retry shortly",
                           type="server_error", code="queue_full",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except LOST as exc:
            raise ReplicaLost from exc
        try:
            start = await anext(stream)
        except LOST as exc:
            raise ReplicaLost from exc
        assert isinstance(start, ResponseStart)
        self.metrics.routed.labels(replica=replica).inc()
        return replica, start

    @staticmethod
    async def whole_body(stream: DeploymentResponseGenerator) -> bytes:
        parts = []
        try:
            async for part in stream:
                assert isinstance(part, ResponseBody)
                parts.append(part.body)
        except LOST as exc:
            raise ReplicaLost from exc
        return b"".join(parts)

    @staticmethod
    def response_headers(start: ResponseStart, replica: str) -> dict[str, str]:
        headers = {key: value for key, value in start.headers if key.lower() not in HOP_HEADERS}
        headers[REPLICA_HEADER] = replica
        return headers

    def streamed(self, stream: DeploymentResponseGenerator, replica: str, start: ResponseStart) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            try:
                async for part in stream:
                    assert isinstance(part, ResponseBody)
                    if part.body:
                        yield part.body
            except LOST as exc:
                self.metrics.lost.labels(phase="mid_stream").inc()
                yield replica_lost_event(exc)
            finally:
                stream.cancel()

        headers = self.response_headers(start, replica)
        return StreamingResponse(body(), start.status, headers, media_type=headers.get("content-type"))
