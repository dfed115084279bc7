"""The speculative loop: draft -> verify -> accept -> emit, until EOS, the token budget or cancel.

Target-only decoding is the same loop with no drafter, so both modes share every line of timing
and bookkeeping. Both KV caches roll back implicitly (see ``CachedModel``): each step asks the
target to score ``context + drafts`` and the cache keeps only what that sequence shares with
what it held.

When a model fails (see ``resilience``), the step leaves no trace and is tried again from the same
context: a failed draft makes it a target-only step; a failed target pass is retried, and while
the target's circuit is open the draft model alone writes the reply, each token marked degraded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import torch
from transformers import PreTrainedTokenizerBase

from specdec_tui.engine.acceptance import Verdict, greedy_verdict, sampled_verdict
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.engine.detokenizer import IncrementalDetokenizer
from specdec_tui.engine.drafters import Draft, Drafter, Sampler, copies_of
from specdec_tui.engine.metrics import RunSummary, StepRecord, summarize
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.engine.resilience import ModelFailure, ModelUnavailable


class PromptTooLongError(ValueError):
    """The prompt does not fit the target model's context window."""


class Origin(StrEnum):
    DRAFT = "draft"  # proposed by the drafter and accepted by the target
    TARGET = "target"  # the target's own token: a correction or the bonus
    DEGRADED = "degraded"  # the draft model's alone while the target was unavailable: never verified


@dataclass(frozen=True)
class DecodeParams:
    k: int = 8
    tau: float = 1.0
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = 0
    #: Let the drafter draft fewer than ``k`` tokens when that is expected to be faster.
    adaptive_k: bool = True
    #: Stop a model draft after a token the draft itself gives less than this probability.
    draft_min_confidence: float = 0.0
    #: Most tokens a prompt-lookup copy proposes per step; 0: ``k``. A copy costs nothing to draft,
    #: so where extra verify rows are cheap it pays to copy further than the model drafts.
    lookup_k: int = 8


@dataclass(frozen=True)
class Token:
    id: int
    origin: Origin
    text: str


@dataclass(frozen=True)
class StepEvent:
    tokens: tuple[Token, ...]
    record: StepRecord
    #: The drafted token the target rejected (the one its own token replaced), if the step had one.
    rejected: Token | None = None


@dataclass(frozen=True)
class FinishedEvent:
    summary: RunSummary
    token_ids: tuple[int, ...]
    text: str


Event = StepEvent | FinishedEvent
Step = tuple[Draft, list[int], bool, StepRecord]
#: The source of the empty draft a step gets when the draft model failed.
DRAFT_FAILED = "draft-failed"


@dataclass
class Failures:
    """The failed passes of one reply: counts, the latest reason, and whether the reply must stop."""

    target: int = 0
    draft: int = 0
    reason: str | None = None
    stopped: bool = False


def origin(position: int, record: StepRecord) -> Origin:
    if record.degraded:
        return Origin.DEGRADED
    return Origin.DRAFT if position < record.accepted else Origin.TARGET


def verify_block(draft: Draft, logits: torch.Tensor, params: DecodeParams, sampler: Sampler) -> Verdict:
    drafts = torch.tensor(draft.tokens, dtype=torch.long)
    if sampler.greedy:
        return greedy_verdict(drafts, logits, params.tau, draft.branches)
    return sampled_verdict(drafts, draft.probs, sampler.probs(logits), params.tau, sampler.generator)


def cut_at_eos(tokens: list[int], eos_ids: frozenset[int]) -> tuple[list[int], bool]:
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1], True
    return tokens, False


class SpeculativeDecoder:
    """Streams replies from a target model, sped up by an optional drafter."""

    def __init__(
        self,
        target: CachedModel,
        tokenizer: PreTrainedTokenizerBase,
        eos_ids: frozenset[int],
        max_context: int,
    ) -> None:
        self.target = target
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.max_context = max_context
        #: What target passes cost by row count, from every step of every reply.
        self.verify_cost = VerifyCost()
        #: Writes the reply one token at a time while the target is unavailable; None: no draft model.
        self.fallback: Drafter | None = None

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: DecodeParams,
        drafter: Drafter | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) >= self.max_context:
            raise PromptTooLongError(
                f"the prompt is {len(prompt_ids)} tokens but the target model's context holds "
                f"{self.max_context}; shorten it or start a new chat"
            )
        generator = torch.Generator()
        generator.manual_seed(params.seed if params.seed is not None else torch.seed())
        sampler = Sampler(params.temperature, params.top_p, generator)
        text = IncrementalDetokenizer(self.tokenizer)
        context = list(prompt_ids)
        records: list[StepRecord] = []
        ttft: float | None = None
        finish = "length"
        failures = Failures()
        start = time.perf_counter()
        while (generated := len(context) - len(prompt_ids)) < params.max_new_tokens:
            room = min(params.max_new_tokens - generated, self.max_context - len(context))
            if room <= 0:
                finish = "context"
                break
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            # The first step is the prompt's pass and drafts only a copy from the prompt, which needs no
            # model's pass: the reply starts when target-only's would, and the draft model first reads
            # the prompt after the target's first token.
            step_drafter = drafter if generated else copies_of(drafter)
            k = min(params.k, room - 1) if step_drafter is not None else 0
            step = self.resilient_step(context, step_drafter, k, room, params, sampler, failures)
            if step is None:
                if failures.stopped:
                    finish = "failed"
                    break
                continue  # a failed pass: nothing was emitted, so the same context is tried again
            draft, emitted, hit_eos, record = step
            record = record if generated else replace(record, prompt=True)
            if not record.degraded and not record.prompt:
                self.verify_cost.observe(record, len(context))
                if step_drafter is not None:
                    step_drafter.observe(record, draft.source)
            context.extend(emitted)
            records.append(record)
            ttft = ttft if ttft is not None else time.perf_counter() - start
            yield StepEvent(
                tuple(Token(t, origin(i, record), text.push(t)) for i, t in enumerate(emitted)),
                record,
                self.rejected(draft, record, emitted),
            )
            if hit_eos:
                finish = "eos"
                break
        summary = summarize(
            records,
            mode=drafter.name if drafter is not None else "target",
            prompt_tokens=len(prompt_ids),
            seconds=time.perf_counter() - start,
            ttft_s=ttft or 0.0,
            finish_reason=finish,
            target_failures=failures.target,
            draft_failures=failures.draft,
            failure=failures.reason,
        )
        generated_ids = tuple(context[len(prompt_ids) :])
        yield FinishedEvent(summary, generated_ids, self.tokenizer.decode(generated_ids, skip_special_tokens=True))

    def rejected(self, draft: Draft, record: StepRecord, emitted: list[int]) -> Token | None:
        """The draft token the target replaced, with its own token or a kept branch, when the step
        emitted that replacement."""
        position = record.accepted - record.branch_kept
        if position >= record.drafted or len(emitted) <= position:
            return None
        token = draft.tokens[position]
        return Token(token, Origin.DRAFT, self.tokenizer.decode([token]))

    def resilient_step(self, context: list[int], drafter: Drafter | None, k: int, room: int, params: DecodeParams,
                       sampler: Sampler, failures: Failures) -> Step | None:
        """``step``, or a degraded step while the target is unavailable; None when nothing was emitted."""
        started = time.perf_counter()
        draft = self.propose(drafter, context, k, sampler, failures).truncated(room - 1)
        draft_s = time.perf_counter() - started
        try:
            return self.step(context, draft, room, params, sampler, draft_s)
        except ModelUnavailable as exc:
            failures.reason = str(exc)
            if self.fallback is None:
                failures.stopped = True
                return None
        except ModelFailure as exc:
            failures.target += 1
            failures.reason = str(exc)
            return None
        return self.degraded_step(context, draft, room, sampler, failures, draft_s)

    def degraded_step(self, context: list[int], draft: Draft, room: int, sampler: Sampler, failures: Failures,
                      draft_s: float) -> Step | None:
        """The draft model's own tokens, unverified: its draft if it made this one, else one new token.

        None if the draft model fails too.
        """
        assert self.fallback is not None
        started = time.perf_counter()
        if draft.source != self.fallback.name or not draft.tokens:
            try:
                draft = self.fallback.propose(context, 1, sampler)
            except ModelFailure as exc:
                failures.draft += not isinstance(exc, ModelUnavailable)
                failures.reason = f"{failures.reason}; {exc}"
                failures.stopped = isinstance(exc, ModelUnavailable)
                return None
        emitted, hit_eos = cut_at_eos(draft.tokens[:room], self.eos_ids)
        record = StepRecord(drafted=0, accepted=0, emitted=len(emitted),
                            draft_s=draft_s + time.perf_counter() - started, verify_s=0.0, degraded=True)
        return Draft([], source=draft.source), emitted, hit_eos, record

    def propose(self, drafter: Drafter | None, context: list[int], k: int, sampler: Sampler,
                failures: Failures) -> Draft:
        """The drafter's proposal; none (a target-only step) when the draft model fails."""
        if drafter is None or k == 0:
            return Draft([])
        try:
            return drafter.propose(context, k, sampler)
        except ModelFailure as exc:
            failures.draft += not isinstance(exc, ModelUnavailable)
            failures.reason = str(exc)
            return Draft([], source=DRAFT_FAILED)

    def step(self, context: list[int], draft: Draft, room: int, params: DecodeParams, sampler: Sampler,
             draft_s: float) -> Step:
        """One round after drafting: score the draft with one target pass and judge it.

        Returns the draft, the tokens to emit (at most ``room``, cut after an EOS), whether an EOS
        was among them, and the step's record.
        """
        drafted = time.perf_counter()
        logits = self.target.logits_for([*context, *draft.tokens], len(draft.tokens) + 1, draft.branches)
        scored = time.perf_counter()
        verdict = verify_block(draft, logits, params, sampler)
        verified = time.perf_counter()
        emitted, hit_eos = cut_at_eos([*verdict.kept(draft.tokens), verdict.next_token][:room], self.eos_ids)
        record = StepRecord(
            drafted=len(draft.tokens),
            accepted=min(verdict.accepted, len(emitted)),
            emitted=len(emitted),
            draft_s=draft_s,
            verify_s=verified - drafted,
            accept_s=verified - scored,
            draft_failed=draft.source == DRAFT_FAILED,
            branches=len(draft.branches),
            branch_kept=verdict.branch is not None and verdict.accepted <= len(emitted),
        )
        return draft, emitted, hit_eos, record
