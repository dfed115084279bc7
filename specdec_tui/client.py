"""A running specdec-serve as a reply source: the chat TUI's replies over HTTP instead of in process.

Each reply is one streamed chat completion with ``speculative.origins``, so every chunk carries
its tokens (with origins) and its step's record, and the last one the whole report: the same
events the in-process engine yields.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from specdec_tui.engine.decoder import (
    DecodeParams,
    Event,
    FinishedEvent,
    Origin,
    PromptTooLongError,
    StepEvent,
    Token,
)
from specdec_tui.engine.metrics import RunSummary, StepRecord, summarize
from specdec_tui.models.errors import ModelError
from specdec_tui.models.progress import Progress, ProgressFn, no_progress
from specdec_tui.runtime import Message

#: Seconds to wait for a server that is still loading its models.
READY_TIMEOUT_S = 900


class RemoteError(RuntimeError):
    """The server refused or failed a request; the message is its own."""


def summary_of(report: dict[str, Any]) -> RunSummary:
    return RunSummary(
        mode=report["mode"],
        prompt_tokens=report["prompt_tokens"],
        new_tokens=report["completion_tokens"],
        steps=report["steps"],
        drafted=report["draft_tokens"],
        accepted=report["accepted_tokens"],
        seconds=report["seconds"],
        ttft_s=report["ttft_ms"] / 1000,
        finish_reason=report["finish_reason"],
        mean_draft_ms=report["mean_draft_ms"],
        mean_verify_ms=report["mean_verify_ms"],
        position_acceptance=tuple(report["per_position_acceptance"]),
        degraded_tokens=report.get("degraded_tokens", 0),
        target_failures=report.get("target_failures", 0),
        draft_failures=report.get("draft_failures", 0),
        failure=report.get("failure"),
    )


def step_event(detail: dict[str, Any]) -> StepEvent:
    step = detail["step"]
    record = StepRecord(drafted=step["drafted"], accepted=step["accepted"], emitted=step["emitted"],
                        draft_s=step["draft_ms"] / 1000, verify_s=step["verify_ms"] / 1000,
                        accept_s=step.get("accept_ms", 0.0) / 1000, degraded=bool(step.get("degraded")),
                        draft_failed=bool(step.get("draft_failed")), prompt=bool(step.get("prompt")))
    tokens = tuple(Token(t["id"], Origin(t["origin"]), t["text"]) for t in detail["tokens"])
    rejected = detail.get("rejected")
    return StepEvent(tokens, record, Token(rejected["id"], Origin.DRAFT, rejected["text"]) if rejected else None)


def _error_message(response: httpx.Response) -> tuple[str, str | None]:
    try:
        error = response.json()["error"]
        return error["message"], error.get("code")
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}", None


class RemoteSource:
    """Replies from specdec-serve at ``base_url`` (e.g. http://127.0.0.1:8000)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                 timeout=httpx.Timeout(timeout, connect=10.0))
        self.target_name = ""
        self.draft_name: str | None = None
        #: The server's budget notes are in its ``/health``; this chat does not fetch them.
        self.memory_note: str | None = None

    def connect(self, progress: ProgressFn = no_progress, ready_timeout: float = READY_TIMEOUT_S) -> RemoteSource:
        """Wait until the server has its models, then learn which pair it serves."""
        deadline = time.monotonic() + ready_timeout
        where = str(self.http.base_url)
        while True:
            try:
                health = self.http.get("/health")
            except httpx.HTTPError as exc:
                raise ModelError(f"cannot reach specdec-serve at {where}: {exc}") from exc
            if health.status_code == 200:
                break
            status = health.json().get("status") if health.headers.get("content-type", "").startswith(
                "application/json") else None
            if status != "loading" or time.monotonic() > deadline:
                raise ModelError(f"specdec-serve at {where} is not ready: {health.text[:200]}")
            progress(Progress(where, "load", 0, None, "waiting for the server to load its models"))
            time.sleep(1.0)
        models = self.http.get("/v1/models")
        if models.status_code != 200:
            raise ModelError(f"specdec-serve at {where}: {_error_message(models)[0]}")
        card = models.json()["data"][0]
        self.target_name, self.draft_name = card["id"], card.get("draft")
        return self

    def reply(self, messages: Sequence[Message], params: DecodeParams, mode: str,
              cancel: threading.Event | None = None, fresh: bool = False,
              conversation_id: str | None = None) -> Iterator[Event]:
        body = {
            "model": self.target_name,
            "messages": [dict(m) for m in messages],
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
            "stream": True,
            "speculative": {"mode": mode, "k": params.k, "tau": params.tau, "adaptive_k": params.adaptive_k,
                            "draft_min_confidence": params.draft_min_confidence,
                            "lookup_k": params.lookup_k, "origins": True,
                            "fresh_cache": fresh},
        }
        ids: list[int] = []
        text: list[str] = []
        records: list[StepRecord] = []
        start = time.perf_counter()
        with self.http.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                message, code = _error_message(response)
                raise (PromptTooLongError if code == "context_length_exceeded" else RemoteError)(message)
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line.removeprefix("data: "))
                if "error" in chunk:
                    raise RemoteError(chunk["error"]["message"])
                detail = chunk.get("speculative") or {}
                if choices := chunk.get("choices"):
                    text.append(choices[0].get("delta", {}).get("content") or "")
                if "step" in detail:
                    event = step_event(detail)
                    ids.extend(t.id for t in event.tokens)
                    records.append(event.record)
                    yield event
                    if cancel is not None and cancel.is_set():
                        break  # closing the stream cancels the reply on the server
                if "report" in detail:
                    yield FinishedEvent(summary_of(detail["report"]), tuple(ids), "".join(text))
                    return
        seconds = time.perf_counter() - start
        summary = summarize(records, mode=mode, prompt_tokens=0, seconds=seconds,
                            ttft_s=records[0].seconds if records else 0.0, finish_reason="cancelled")
        yield FinishedEvent(summary, tuple(ids), "".join(text))
