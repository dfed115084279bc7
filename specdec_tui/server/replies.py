"""One request's reply, from the worker's events to what the API sends: text pieces with stop
strings applied, each step's tokens and record, and at the end the speculation report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, StepEvent, Token
from specdec_tui.engine.metrics import RunSummary, StepRecord, acceptance_histogram
from specdec_tui.server.metrics import ServerMetrics
from specdec_tui.server.schema import SpeculativeReport, StepInfo, TokenOrigin
from specdec_tui.server.worker import Ended, Failed, Job, JobItem

#: The engine's finish reasons as OpenAI names them; a reply cancelled by a client gone or a shutdown is
#: an "abort", as vLLM counts it.
OPENAI_FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "abort",
                 "failed": "error"}


class StopFilter:
    """Cuts text at the first stop string, holding back any tail that could be the start of one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = list(stops)
        self.longest = max(map(len, self.stops), default=0)
        self.pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        """The part of ``text`` (after what was held back) that is safe to send now."""
        if self.stopped:
            return ""
        self.pending += text
        hit = self.first_hit()
        # A stop that starts earlier than the hit and could still complete must be waited for; only
        # the last longest - 1 positions can hold one unfinished.
        first_open = max(0, len(self.pending) - self.longest + 1)
        unsure = next((j for j in range(first_open, hit) if self.could_start_at(j)), None)
        if unsure is None and hit < len(self.pending):
            return self.cut(hit)
        safe = hit if unsure is None else unsure
        out, self.pending = self.pending[:safe], self.pending[safe:]
        return out

    def flush(self) -> str:
        """What was held back, cut at a stop it holds: no more text can come to complete another."""
        if self.stopped:
            return ""
        hit = self.first_hit()
        if hit < len(self.pending):
            return self.cut(hit)
        out, self.pending = self.pending, ""
        return out

    def first_hit(self) -> int:
        """Where the earliest complete stop string starts in what is held, or its length if none."""
        return min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0), default=len(self.pending))

    def could_start_at(self, j: int) -> bool:
        tail = self.pending[j:]
        return any(len(s) > len(tail) and s.startswith(tail) for s in self.stops)

    def cut(self, hit: int) -> str:
        out, self.pending, self.stopped = self.pending[:hit], "", True
        return out


def speculative_report(summary: RunSummary, records: Sequence[StepRecord], params: DecodeParams,
                       queue_s: float, finish_reason: str) -> SpeculativeReport:
    return SpeculativeReport(
        mode=summary.mode,
        k=params.k,
        tau=params.tau,
        adaptive_k=params.adaptive_k,
        lookup_k=params.lookup_k,
        lossless=params.tau == 1.0,
        steps=summary.steps,
        draft_tokens=summary.drafted,
        accepted_tokens=summary.accepted,
        acceptance_rate=summary.acceptance_rate,
        mean_acceptance_length=1 + summary.mean_accepted,
        per_position_acceptance=list(summary.position_acceptance),
        acceptance_histogram=acceptance_histogram(records),
        draft_ms=1000 * sum(r.draft_s for r in records),
        verify_ms=1000 * sum(r.verify_s for r in records),
        mean_draft_ms=summary.mean_draft_ms,
        mean_verify_ms=summary.mean_verify_ms,
        prompt_tokens=summary.prompt_tokens,
        completion_tokens=summary.new_tokens,
        ttft_ms=1000 * summary.ttft_s,
        queue_ms=1000 * queue_s,
        seconds=summary.seconds,
        tokens_per_s=summary.tokens_per_s,
        finish_reason=finish_reason,
        degraded=summary.degraded,
        degraded_tokens=summary.degraded_tokens,
        target_failures=summary.target_failures,
        draft_failures=summary.draft_failures,
        failure=summary.failure,
    )


def step_info(record: StepRecord) -> StepInfo:
    return StepInfo(drafted=record.drafted, accepted=record.accepted, emitted=record.emitted,
                    draft_ms=1000 * record.draft_s, verify_ms=1000 * record.verify_s, accept_ms=1000 * record.accept_s,
                    degraded=record.degraded or None, draft_failed=record.draft_failed or None,
                    branches=record.branches or None, branch_kept=record.branch_kept or None,
                    prompt=record.prompt or None)


def token_origins(tokens: Sequence[Token]) -> list[TokenOrigin]:
    return [TokenOrigin(id=t.id, text=t.text, origin=t.origin.value) for t in tokens]


@dataclass(frozen=True)
class Piece:
    """What one step adds: the text safe to send, and the step's tokens and record."""

    text: str
    tokens: tuple[Token, ...]
    record: StepRecord | None
    rejected: Token | None = None


@dataclass
class Outcome:
    text: str
    finish_reason: str
    summary: RunSummary
    report: SpeculativeReport


class ReplyFailed(Exception):
    """The engine raised while decoding this reply."""


@dataclass
class Reply:
    """Reads one started job to its end; ``outcome`` is set once ``pieces`` is exhausted.

    A reader that stops early (a client gone mid-stream) cancels the reply at the next step; what
    is left of it is still read, in the background, so the metrics count every reply whole.
    """

    job: Job
    params: DecodeParams
    stops: Sequence[str]
    metrics: ServerMetrics
    arrived: float
    queue_s: float
    outcome: Outcome | None = None
    records: list[StepRecord] = field(default_factory=list)
    _stop: StopFilter = field(init=False)
    _sent: list[str] = field(default_factory=list)
    _streamed: str = ""
    _ended: bool = False
    _drain_task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self._stop = StopFilter(self.stops)

    async def pieces(self) -> AsyncIterator[Piece]:
        try:
            while not self._ended:
                piece = self._take(await self.job.items.get())
                if piece is not None:
                    yield piece
        finally:
            if not self._ended:
                self.job.cancel.set()
                self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while not self._ended:
            try:
                self._take(await self.job.items.get())
            except ReplyFailed:
                pass

    def _take(self, item: JobItem) -> Piece | None:
        if isinstance(item, StepEvent):
            self.metrics.observe_step(item.record, first=not self.records)
            self.records.append(item.record)
            piece = "".join(t.text for t in item.tokens)
            self._streamed += piece
            text = self._stop.push(piece)
            self._sent.append(text)
            if self._stop.stopped:
                self.job.cancel.set()
            return Piece(text, item.tokens, item.record, item.rejected)
        if isinstance(item, FinishedEvent):
            # The last characters may have been held back as an unfinished character.
            rest = item.text[len(self._streamed):] if item.text.startswith(self._streamed) else ""
            tail = self._stop.push(rest) + self._stop.flush()
            self._sent.append(tail)
            reason = "stop" if self._stop.stopped else item.summary.finish_reason
            report = speculative_report(item.summary, self.records, self.params, self.queue_s, reason)
            self.outcome = Outcome("".join(self._sent), OPENAI_FINISH[reason], item.summary, report)
            self.metrics.observe_request(item.summary, self.outcome.finish_reason, self.queue_s,
                                         time.perf_counter() - self.arrived)
            return Piece(tail, (), None) if tail else None
        if isinstance(item, Failed):
            self.metrics.requests.labels(finished_reason="error").inc()
            raise ReplyFailed(f"{type(item.error).__name__}: {item.error}") from item.error
        if isinstance(item, Ended):
            self._ended = True
        return None
