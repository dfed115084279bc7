"""The speculative loop: draft -> verify -> accept -> emit, until EOS, the token budget or cancel.

Target-only decoding is the same loop with no drafter, so both modes share every line of timing
and bookkeeping. Both KV caches roll back implicitly (see ``CachedModel``): each step asks the
target to score ``context + drafts`` and the cache keeps only what that sequence shares with
what it held.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

import torch
from transformers import PreTrainedTokenizerBase

from specdec_tui.engine.acceptance import Verdict, greedy_verdict, sampled_verdict
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.engine.detokenizer import IncrementalDetokenizer
from specdec_tui.engine.drafters import Draft, Drafter, Sampler
from specdec_tui.engine.metrics import RunSummary, StepRecord, summarize
from specdec_tui.engine.policy import VerifyCost


class PromptTooLongError(ValueError):
    """The prompt does not fit the target model's context window."""


class Origin(StrEnum):
    DRAFT = "draft"  # proposed by the drafter and accepted by the target
    TARGET = "target"  # the target's own token: a correction or the bonus


@dataclass(frozen=True)
class DecodeParams:
    k: int = 4
    tau: float = 1.0
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = 0
    #: Let the drafter draft fewer than ``k`` tokens when that is expected to be faster.
    adaptive_k: bool = True
    #: Stop a model draft after a token the draft itself gives less than this probability.
    draft_min_confidence: float = 0.0


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


def verify_block(draft: Draft, logits: torch.Tensor, params: DecodeParams, sampler: Sampler) -> Verdict:
    drafts = torch.tensor(draft.tokens, dtype=torch.long)
    if sampler.greedy:
        return greedy_verdict(drafts, logits, params.tau)
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
        start = time.perf_counter()
        self.target.prefill(context[:-1])
        while (generated := len(context) - len(prompt_ids)) < params.max_new_tokens:
            room = min(params.max_new_tokens - generated, self.max_context - len(context))
            if room <= 0:
                finish = "context"
                break
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            k = min(params.k, room - 1) if drafter is not None else 0
            draft, emitted, hit_eos, record = self.step(context, drafter, k, room, params, sampler)
            context.extend(emitted)
            records.append(record)
            self.verify_cost.observe(record)
            if drafter is not None:
                drafter.observe(record, draft.source)
            ttft = ttft if ttft is not None else time.perf_counter() - start
            yield StepEvent(
                tuple(
                    Token(t, Origin.DRAFT if i < record.accepted else Origin.TARGET, text.push(t))
                    for i, t in enumerate(emitted)
                ),
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
        )
        generated_ids = tuple(context[len(prompt_ids) :])
        yield FinishedEvent(summary, generated_ids, self.tokenizer.decode(generated_ids, skip_special_tokens=True))

    def rejected(self, draft: Draft, record: StepRecord, emitted: list[int]) -> Token | None:
        """The draft token the target replaced with its own, when the step emitted that replacement."""
        if record.accepted >= record.drafted or len(emitted) <= record.accepted:
            return None
        token = draft.tokens[record.accepted]
        return Token(token, Origin.DRAFT, self.tokenizer.decode([token]))

    def step(
        self, context: list[int], drafter: Drafter | None, k: int, room: int, params: DecodeParams, sampler: Sampler
    ) -> tuple[Draft, list[int], bool, StepRecord]:
        """One round: draft up to ``k`` tokens, score them with one target pass, judge them.

        Returns the draft, the tokens to emit (at most ``room``, cut after an EOS), whether an EOS
        was among them, and the step's record.
        """
        started = time.perf_counter()
        draft = drafter.propose(context, k, sampler) if drafter is not None and k > 0 else Draft([])
        drafted = time.perf_counter()
        logits = self.target.logits_for([*context, *draft.tokens], len(draft.tokens) + 1)
        scored = time.perf_counter()
        verdict = verify_block(draft, logits, params, sampler)
        verified = time.perf_counter()
        emitted, hit_eos = cut_at_eos([*draft.tokens[: verdict.accepted], verdict.next_token][:room], self.eos_ids)
        record = StepRecord(
            drafted=len(draft.tokens),
            accepted=min(verdict.accepted, len(emitted)),
            emitted=len(emitted),
            draft_s=drafted - started,
            verify_s=verified - drafted,
            accept_s=verified - scored,
        )
        return draft, emitted, hit_eos, record
