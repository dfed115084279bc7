"""The HTTP API: OpenAI chat and completions (streamed or not), ``/generate``, models, health, metrics.

Routes get the running system through dependencies: ``runtime`` (503 while the models load) and
``authorized`` (the API key). Every error leaves as the OpenAI error object, from one handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from specdec_tui.config import DecodingSettings, Settings
from specdec_tui.engine.decoder import DecodeParams, Event
from specdec_tui.engine.modes import MODES
from specdec_tui.observability.setup import Observers
from specdec_tui.runtime import Runtime, decode_params
from specdec_tui.server.metrics import ServerMetrics
from specdec_tui.server.replies import Reply, ReplyFailed, step_info, token_origins
from specdec_tui.server.schema import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    ChunkSpeculative,
    Completion,
    CompletionChoice,
    CompletionRequest,
    Delta,
    ErrorBody,
    ErrorResponse,
    GenerateRequest,
    GenerateResponse,
    ModelCard,
    ModelList,
    SamplingFields,
    SpeculativeOptions,
    UnsupportedValue,
    Usage,
)
from specdec_tui.server.worker import EngineWorker, Job, QueueFull, QueueTimeout

#: Seconds a client is told to wait before retrying a full queue.
RETRY_AFTER_S = 2
#: How often a non-streaming request checks that its client is still there.
DISCONNECT_POLL_S = 0.25


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers


def error_response(status: int, message: str, type: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(message=message, type=type, param=param, code=code))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


class ServerState:
    """What the routes share: the settings, the runtime once loaded, its worker and the metrics."""

    def __init__(self, settings: Settings, observers: Observers | None = None) -> None:
        self.settings = settings
        #: The replies' listeners; the runtime, once loaded, carries the same ones.
        self.observers = observers or Observers()
        self.runtime: Runtime | None = None
        self.worker: EngineWorker | None = None
        self.load_error: str | None = None
        self.started = time.time()
        self.metrics = ServerMetrics(running=lambda: self.running, waiting=lambda: self.waiting,
                                     breakers=lambda: self.runtime.breakers if self.runtime else None)

    @property
    def running(self) -> int:
        """Replies being decoded now (0 or 1)."""
        return int(self.worker is not None and self.worker.running is not None)

    @property
    def waiting(self) -> int:
        return self.worker.waiting if self.worker is not None else 0

    def ready(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.worker = EngineWorker(self._generate, self.settings.server.queue_size)

    def failed(self, reason: str) -> None:
        self.load_error = reason

    def _generate(self, job: Job) -> Iterator[Event]:
        assert self.runtime is not None
        return self.runtime.generate(job.prompt_ids, job.params, job.mode, job.cancel, fresh=job.fresh,
                                     operation=job.operation, messages=job.messages, parent=job.parent)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.observers.close()


# ------------------------------------------------------------------ turning a request into a job


def _first_error(exc: ValidationError | RequestValidationError, prefix: str = "") -> tuple[str, str | None]:
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, UnsupportedValue):
        return str(cause), cause.param
    loc = [str(part) for part in error["loc"] if part != "body"]
    param = prefix + ".".join(loc) if loc else None
    if error["type"] == "json_invalid":
        return f"the body is not valid JSON: {error.get('ctx', {}).get('error', error['msg'])}", None
    if error["type"] == "extra_forbidden":
        return f"unknown field {param}", param
    if error["type"] == "missing":
        return f"missing field {param}", param
    message = error["msg"].removeprefix("Value error, ")
    return (f"{param}: {message}" if param else message), param


def request_params(runtime: Runtime, *, max_tokens: int | None, temperature: float | None, top_p: float | None,
                  seed: int | None, options: SpeculativeOptions, field_prefix: str) -> tuple[DecodeParams, str]:
    """The request's decoding parameters over the server's settings, validated as settings are."""
    given = {
        "max_new_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "k": options.k,
        "tau": options.tau,
        "adaptive_k": options.adaptive_k,
        "draft_min_confidence": options.draft_min_confidence,
        "lookup_k": options.lookup_k,
    }
    overrides = {name: value for name, value in given.items() if value is not None}
    try:
        decoding = DecodingSettings.model_validate({**runtime.settings.decoding.model_dump(), **overrides})
    except ValidationError as exc:
        message, param = _first_error(exc, field_prefix)
        raise APIError(400, message, param=param) from None
    mode = options.mode or runtime.default_mode
    mode_param = f"{field_prefix}mode"
    if mode not in MODES:
        raise APIError(400, f"unknown mode {mode!r}; expected one of {', '.join(MODES)}", param=mode_param)
    if mode not in runtime.modes:
        raise APIError(400, f"mode {mode!r} needs a draft model, and this server has none loaded",
                       param=mode_param)
    return decode_params(decoding), mode


def check_prompt(runtime: Runtime, prompt_ids: Sequence[int], param: str) -> None:
    if not prompt_ids:
        raise APIError(400, "the prompt is empty", param=param)
    if len(prompt_ids) >= runtime.engine.max_context:
        raise APIError(400, f"the prompt is {len(prompt_ids)} tokens but the model's context holds "
                            f"{runtime.engine.max_context}", param=param, code="context_length_exceeded")


async def start_reply(state: ServerState, prompt_ids: Sequence[int], params: DecodeParams, mode: str,
                      stops: Sequence[str], fresh: bool, operation: str = "chat",
                      messages: Sequence[dict[str, str]] | None = None) -> Reply:
    """Queue the reply and wait until the worker starts it: every refusal comes before any output."""
    assert state.worker is not None and state.runtime is not None
    arrived = time.perf_counter()
    telemetry = state.observers.telemetry
    job = Job(prompt_ids, params, mode, fresh, asyncio.get_running_loop(), operation, messages,
              telemetry.current_context() if telemetry is not None else None)
    try:
        state.worker.submit(job)
    except QueueFull:
        state.metrics.rejected.labels(reason="queue_full").inc()
        raise APIError(503, "the server is busy: the request queue is full; retry shortly", type="server_error",
                       code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    try:
        started = await state.worker.wait_started(job, state.settings.server.request_timeout)
    except QueueTimeout:
        state.metrics.rejected.labels(reason="queue_timeout").inc()
        raise APIError(503, f"the request waited {state.settings.server.request_timeout:g} s in the queue "
                            "without starting; retry later", type="server_error", code="queue_timeout",
                       headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    except asyncio.CancelledError:
        state.worker.withdraw(job)  # the client left while it waited
        job.cancel.set()
        raise
    return Reply(job, params, stops, state.metrics, arrived, started.waited_s)


async def run_to_end(reply: Reply, request: Request, runtime: Runtime) -> None:
    """Read a reply whole, cancelling it if the client disconnects meanwhile."""

    async def watch() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(DISCONNECT_POLL_S)
        reply.job.cancel.set()

    watcher = asyncio.create_task(watch())
    try:
        async for _ in reply.pieces():
            pass
    except ReplyFailed as exc:
        raise APIError(500, f"generation failed: {exc}", type="server_error", code="generation_failed") from exc
    finally:
        watcher.cancel()
    assert reply.outcome is not None
    if reply.outcome.summary.finish_reason == "failed":
        raise target_unavailable(runtime, reply.outcome.summary.failure or "its passes fail")


def sse(payload: BaseModel | dict[str, Any] | str) -> str:
    if isinstance(payload, BaseModel):
        payload = payload.model_dump_json(exclude_none=True)
    elif isinstance(payload, dict):
        payload = json.dumps(payload)
    return f"data: {payload}\n\n"


def _error_event(exc: ReplyFailed) -> dict[str, Any]:
    body = ErrorBody(message=f"generation failed: {exc}", type="server_error", code="generation_failed")
    return {"error": body.model_dump()}


def envelope(kind: str, runtime: Runtime) -> dict[str, Any]:
    """The id, time and model every response and chunk of one reply carries."""
    return {"id": f"{kind}-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": runtime.target_name}


def usage_of(reply: Reply, prompt_tokens: int) -> Usage:
    assert reply.outcome is not None
    new = reply.outcome.summary.new_tokens
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=new, total_tokens=prompt_tokens + new)


class ChunkMaker(Protocol):
    """Builds one streamed chunk of an endpoint's kind: text, a finish reason, detail or usage."""

    def __call__(self, text: str | None, finish: str | None, detail: ChunkSpeculative | None,
                 usage: Usage | None = None) -> BaseModel: ...


def reported_degraded(detail: ChunkSpeculative | None) -> bool | None:
    """A chunk's ``degraded``: set on the finishing chunk, the one that carries the report."""
    return detail.report.degraded if detail is not None and detail.report is not None else None


async def event_stream(reply: Reply, chunk: ChunkMaker, opening: BaseModel | None, origins: bool,
                       include_usage: bool, prompt_tokens: int) -> AsyncIterator[str]:
    """A reply as server-sent events: its pieces, the finish with the report, usage, ``[DONE]``."""
    if opening is not None:
        yield sse(opening)
    try:
        async for piece in reply.pieces():
            detail = None
            if origins and piece.record is not None:
                detail = ChunkSpeculative(tokens=token_origins(piece.tokens), step=step_info(piece.record),
                                          rejected=token_origins([piece.rejected])[0] if piece.rejected else None)
            if piece.text or detail is not None:
                yield sse(chunk(piece.text, None, detail))
    except ReplyFailed as exc:
        yield sse(_error_event(exc))
        yield sse("[DONE]")
        return
    assert reply.outcome is not None
    yield sse(chunk(None, reply.outcome.finish_reason, ChunkSpeculative(report=reply.outcome.report)))
    if include_usage:
        yield sse(chunk(None, None, None, usage_of(reply, prompt_tokens)))
    yield sse("[DONE]")


# ------------------------------------------------------------------ dependencies

BEARER = HTTPBearer(auto_error=False)


def server_state(request: Request) -> ServerState:
    return request.app.state.specdec


State = Annotated[ServerState, Depends(server_state)]


def check_api_key(key: str | None, credentials: HTTPAuthorizationCredentials | None) -> None:
    """401 unless the bearer token is ``key`` (any request passes when no key is set)."""
    if key is None:
        return
    if credentials is None or not secrets.compare_digest(credentials.credentials.encode(), key.encode()):
        raise APIError(401, "missing or wrong API key: send Authorization: Bearer <key>",
                       type="authentication_error", code="invalid_api_key")


def authorized(state: State,
               credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
    check_api_key(state.settings.server.api_key, credentials)


def ready_runtime(state: State) -> Runtime:
    if state.runtime is None:
        why = f"the models failed to load: {state.load_error}" if state.load_error else "the models are loading"
        raise APIError(503, why, type="server_error", code="model_not_ready",
                       headers={"Retry-After": str(RETRY_AFTER_S)})
    breakers = state.runtime.breakers
    if breakers is not None and breakers.target.is_open and state.runtime.draft_name is None:
        raise target_unavailable(state.runtime, breakers.target.why_open())
    return state.runtime


def target_unavailable(runtime: Runtime, why: str) -> APIError:
    """503 for a target whose circuit is open when no draft model can write instead."""
    breakers = runtime.breakers
    retry = max(1, round(breakers.target.circuit.reset_timeout if breakers else RETRY_AFTER_S))
    return APIError(503, f"the target model is unavailable ({why}) and no draft model is loaded to fall back on",
                    type="server_error", code="target_unavailable", headers={"Retry-After": str(retry)})


Ready = Annotated[Runtime, Depends(ready_runtime)]


def check_model(runtime: Runtime, name: str) -> None:
    if name != runtime.target_name:
        raise APIError(404, f"the model {name!r} does not exist; this server serves {runtime.target_name!r}",
                       param="model", code="model_not_found")


# ------------------------------------------------------------------ routes

router = APIRouter()
api = APIRouter(dependencies=[Depends(authorized)])

def health_report(state: ServerState) -> tuple[dict[str, Any], int]:
    """What ``/health`` answers: the body and its status code (503 until the models are loaded)."""
    runtime = state.runtime
    degraded = runtime.degraded if runtime else None
    body: dict[str, Any] = {
        "status": "degraded" if degraded else "ok" if runtime else "failed" if state.load_error else "loading",
        "model": runtime.target_name if runtime else state.settings.models.target,
        "draft": runtime.draft_name if runtime else state.settings.models.draft,
        "running": state.running,
        "waiting": state.waiting,
        "queue_size": state.settings.server.queue_size,
    }
    if runtime is not None and runtime.breakers is not None:
        body["breakers"] = {breaker.name: breaker.state for breaker in runtime.breakers}
    if degraded:
        body["degraded"] = degraded
    if runtime is not None and runtime.memory_note:
        body["memory"] = runtime.memory_note
    if state.settings.faults.enabled:
        body["fault_injection"] = state.settings.faults.describe()
    if state.load_error:
        body["error"] = state.load_error
    return body, 200 if runtime else 503


@router.get("/health")
async def health(state: State) -> JSONResponse:
    body, status = health_report(state)
    return JSONResponse(body, status_code=status)

@api.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

@api.get("/v1/models")
async def models(state: State, runtime: Ready) -> ModelList:
    card = ModelCard(id=runtime.target_name, created=int(state.started), draft=runtime.draft_name,
                     modes=list(runtime.modes), max_context=runtime.engine.max_context)
    return ModelList(data=[card])

def openai_params(runtime: Runtime, body: SamplingFields) -> tuple[DecodeParams, str, SpeculativeOptions]:
    """An OpenAI request's decoding parameters and mode, and its ``speculative`` options."""
    check_model(runtime, body.model)
    options = body.speculative or SpeculativeOptions()
    params, mode = request_params(runtime, max_tokens=body.token_limit(), temperature=body.temperature,
                                  top_p=body.top_p, seed=body.seed, options=options, field_prefix="speculative.")
    return params, mode, options


def streamed(reply: Reply, chunk: ChunkMaker, opening: BaseModel | None, body: SamplingFields,
             prompt_tokens: int) -> StreamingResponse:
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    origins = body.speculative is not None and body.speculative.origins
    return StreamingResponse(event_stream(reply, chunk, opening, origins, include_usage, prompt_tokens),
                             media_type="text/event-stream")


@api.post("/v1/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionRequest, request: Request, state: State,
                           runtime: Ready) -> ChatCompletion | StreamingResponse:
    params, mode, options = openai_params(runtime, body)
    chat = body.chat()
    prompt_ids = runtime.prompt_ids(chat)
    check_prompt(runtime, prompt_ids, "messages")
    reply = await start_reply(state, prompt_ids, params, mode, body.stops(), options.fresh_cache, messages=chat)
    made = envelope("chatcmpl", runtime)
    if body.stream:
        opening = ChatCompletionChunk(**made, choices=[ChunkChoice(delta=Delta(role="assistant", content=""))])
        return streamed(reply, chat_chunk(made), opening, body, len(prompt_ids))
    await run_to_end(reply, request, runtime)
    assert reply.outcome is not None
    return ChatCompletion(
        **made,
        choices=[ChatChoice(message=AssistantMessage(content=reply.outcome.text),
                            finish_reason=reply.outcome.finish_reason)],
        usage=usage_of(reply, len(prompt_ids)),
        degraded=reply.outcome.summary.degraded,
        speculative=reply.outcome.report,
    )

def chat_chunk(made: dict[str, Any]) -> ChunkMaker:
    def chunk(text: str | None, finish: str | None, detail: ChunkSpeculative | None,
              usage: Usage | None = None) -> BaseModel:
        choices = [] if usage else [ChunkChoice(delta=Delta(content=text), finish_reason=finish)]
        return ChatCompletionChunk(**made, choices=choices, usage=usage, speculative=detail,
                                   degraded=reported_degraded(detail))

    return chunk


@api.post("/v1/completions", response_model=None)
async def completions(body: CompletionRequest, request: Request, state: State,
                      runtime: Ready) -> Completion | StreamingResponse:
    params, mode, options = openai_params(runtime, body)
    prompt_ids = completion_prompt_ids(runtime, body.prompt)
    check_prompt(runtime, prompt_ids, "prompt")
    reply = await start_reply(state, prompt_ids, params, mode, body.stops(), options.fresh_cache,
                              operation="text_completion")
    made = envelope("cmpl", runtime)
    if body.stream:
        return streamed(reply, completion_chunk(made), None, body, len(prompt_ids))
    await run_to_end(reply, request, runtime)
    assert reply.outcome is not None
    return Completion(**made, choices=[CompletionChoice(text=reply.outcome.text,
                                                        finish_reason=reply.outcome.finish_reason)],
                      usage=usage_of(reply, len(prompt_ids)), degraded=reply.outcome.summary.degraded,
                      speculative=reply.outcome.report)

def completion_chunk(made: dict[str, Any]) -> ChunkMaker:
    def chunk(text: str | None, finish: str | None, detail: ChunkSpeculative | None,
              usage: Usage | None = None) -> BaseModel:
        choices = [] if usage else [CompletionChoice(text=text or "", finish_reason=finish)]
        return Completion(**made, choices=choices, usage=usage, speculative=detail, degraded=reported_degraded(detail))

    return chunk


@api.post("/generate")
async def generate(body: GenerateRequest, request: Request, state: State, runtime: Ready) -> GenerateResponse:
    options = SpeculativeOptions(mode=body.mode, k=body.k, tau=body.tau, adaptive_k=body.adaptive_k)
    params, mode = request_params(runtime, max_tokens=body.max_new_tokens, temperature=body.temperature,
                                 top_p=body.top_p, seed=body.seed, options=options, field_prefix="")
    chat = None
    if body.messages is not None:
        chat = ChatCompletionRequest(model=runtime.target_name, messages=body.messages).chat()
        prompt_ids, param = runtime.prompt_ids(chat), "messages"
    else:
        prompt_ids, param = completion_prompt_ids(runtime, body.prompt or ""), "prompt"
    check_prompt(runtime, prompt_ids, param)
    reply = await start_reply(state, prompt_ids, params, mode, body.stops(), fresh=False,
                              operation="chat" if chat is not None else "text_completion", messages=chat)
    await run_to_end(reply, request, runtime)
    outcome = reply.outcome
    assert outcome is not None
    summary = outcome.summary
    return GenerateResponse(
        text=outcome.text,
        acceptance_rate=summary.acceptance_rate,
        latency_ms=1000 * (reply.queue_s + summary.seconds),
        tokens_per_s=summary.tokens_per_s,
        ttft_ms=1000 * summary.ttft_s,
        mean_accepted_per_step=summary.mean_accepted,
        steps=summary.steps,
        drafted=summary.drafted,
        accepted=summary.accepted,
        finish_reason=outcome.finish_reason,
        degraded=summary.degraded,
        speculative=outcome.report,
    )


# ------------------------------------------------------------------ the app


def add_error_handlers(app: FastAPI) -> None:
    """Every error leaves ``app`` as the OpenAI error object."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _first_error(exc)
        return error_response(400, message, "invalid_request_error", param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(exc.status_code, str(exc.detail), kind)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")


def create_app(state: ServerState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        state.close()

    app = FastAPI(title="specdec-serve", version="0.1.0", lifespan=lifespan,
                  summary="OpenAI-compatible speculative decoding, with what speculation did per request")
    app.state.specdec = state

    add_error_handlers(app)
    app.include_router(router)
    app.include_router(api)
    if state.observers.telemetry is not None:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        telemetry = state.observers.telemetry
        FastAPIInstrumentor.instrument_app(app, tracer_provider=telemetry.tracer_provider,
                                           meter_provider=telemetry.meter_provider, exclude_spans=["receive", "send"])
    return app


def completion_prompt_ids(runtime: Runtime, prompt: str | list[str] | list[int]) -> list[int]:
    """A completions prompt: raw text (no chat template) or token ids."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        ids = [int(t) for t in prompt]
        if any(not 0 <= t < runtime.pair.target.vocab_size for t in ids):
            raise APIError(400, f"token ids must be in 0..{runtime.pair.target.vocab_size - 1}", param="prompt")
        return ids
    text = prompt[0] if isinstance(prompt, list) else prompt
    return runtime.pair.target.tokenizer.encode(str(text))

