"""Drafters propose the next few tokens cheaply; the target then verifies them in one pass.

- ``ModelDrafter``: a small causal LM sharing the target's tokenizer, run autoregressively.
- ``PromptLookupDrafter``: copies what followed the latest earlier occurrence of the context's
  last n-gram (free, and strong when the reply repeats the prompt, as in code editing).
- ``HybridDrafter``: prompt lookup when it finds a match (and its copies have been paying), the
  model otherwise, its draft followed by a copy where the draft's last tokens were seen before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import torch

from specdec_tui.engine.acceptance import first_argmax, one_hot_rows, sampling_probs
from specdec_tui.engine.cached_model import Branch, CachedModel
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import DraftPolicy


@dataclass
class Sampler:
    """Temperature, top-p and the random stream of one reply."""

    temperature: float
    top_p: float
    generator: torch.Generator

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return sampling_probs(logits, self.temperature, self.top_p)

    def sample(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))


@dataclass(frozen=True)
class Draft:
    """Proposed tokens, who proposed them, and when sampled the draft distribution q of each (k, vocab).

    ``branches`` (greedy drafts only) are ``(i, token)`` pairs, i ascending: the draft's runner-up
    ``token`` at position i, verified in the same target pass as a stand-in for ``tokens[i]`` and kept
    when the target rejects ``tokens[i]`` but agrees with it.
    """

    tokens: list[int]
    probs: torch.Tensor | None = None
    source: str = ""
    branches: list[Branch] = field(default_factory=list)

    def truncated(self, most: int) -> Draft:
        """The first ``most`` tokens (a copy may run past the room the reply has left)."""
        if len(self.tokens) <= most:
            return self
        probs = self.probs[:most] if self.probs is not None else None
        return Draft(self.tokens[:most], probs, self.source, [b for b in self.branches if b[0] < most])


class Drafter(Protocol):
    name: str

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        """Up to ``k`` tokens likely to follow ``context``."""
        ...

    def observe(self, record: StepRecord, source: str) -> None:
        """Learn from how the step that verified a draft from ``source`` went."""
        ...


class ModelDrafter:
    name = "model"

    def __init__(self, model: CachedModel, vocab_size: int, min_confidence: float = 0.0,
                 policy: DraftPolicy | None = None, branching: bool = False) -> None:
        """``vocab_size`` is the target's logit width; ``min_confidence`` stops a draft early.

        Drafting stops after a token whose draft probability is below ``min_confidence``: the
        target is then unlikely to accept what would follow, and each draft step costs time.
        ``policy``, if given, decides whether a step drafts at all; the draft then goes on, up to
        the step's ``k``, while the policy expects the next token to pay for itself given how sure
        the draft was of the tokens so far. Where ``branching`` (the target verifies branches), the
        policy then picks the greedy positions that also offer their runner-up token as a branch:
        those where the draft doubted.
        """
        self.model = model
        self.vocab_size = vocab_size
        self.min_confidence = min_confidence
        self.policy = policy
        self.branching = branching
        #: Tokens the latest draft had to catch up on first (a whole prompt after a reset).
        self.caught_up = 0
        #: The draft's probability of each token of its latest draft.
        self.confidences: list[float] = []
        #: The positions of its latest draft that offered a branch.
        self.branched: list[int] = []
        self.embeddable = model.input_vocab

    def _embeddable(self, context: Sequence[int]) -> Sequence[int]:
        """``context`` with ids the draft has no embedding for (padded target vocabularies) replaced."""
        if self.embeddable >= self.vocab_size:
            return context
        return [t if t < self.embeddable else 0 for t in context]

    def _align(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the target's vocabulary: extra draft ids cut, missing ones impossible."""
        width = logits.shape[-1]
        if width >= self.vocab_size:
            return logits[: self.vocab_size]
        return torch.cat([logits, logits.new_full((self.vocab_size - width,), float("-inf"))])

    def observe(self, record: StepRecord, source: str) -> None:
        if self.policy is not None and source == self.name:
            # A draft that first had to read tokens (a prompt, or those of steps it did not draft)
            # took longer than drafting alone: its time bounds the cost only from above.
            self.policy.observe(record, cost_is_typical=self.caught_up <= 2, confidences=self.confidences,
                                branched=self.branched)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        branches_planned = 0
        self.confidences, self.branched = [], []
        if self.policy is not None:
            drafts, branches_planned = self.policy.plan(k, self.branching and sampler.greedy)
            k = k if drafts else 0
        if k == 0:
            return Draft([], source=self.name)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        context = self._embeddable(context)
        self.model.move_window(len(context))
        logits = self._align(self.model.logits_for(context, 1)[0])
        self.caught_up = self.model.last_fed
        while True:
            if sampler.greedy:
                token = int(first_argmax(logits))
                rows.append(logits)
                # A softmax over the whole vocabulary, so only where something reads it.
                confidence = (float(torch.softmax(logits, -1)[token])
                              if self.policy is not None or self.min_confidence else 1.0)
            else:
                q = sampler.probs(logits)
                token = sampler.sample(q)
                rows.append(q)
                confidence = float(q[token])
            tokens.append(token)
            self.confidences.append(confidence)
            if len(tokens) >= k or confidence < self.min_confidence:
                break
            if self.policy is not None and not self.policy.keep_drafting(self.confidences, branches_planned):
                break
            logits = self._align(self.model.logits_for([*context, *tokens], 1)[0])
        if not sampler.greedy:
            return Draft(tokens, torch.stack(rows), self.name)
        return Draft(tokens, source=self.name, branches=self._branches(tokens, rows))

    def _branches(self, tokens: list[int], logits: list[torch.Tensor]) -> list[Branch]:
        """The runner-up token at each position the policy picks for a branch (``logits``: the draft's
        at each position)."""
        if self.policy is None or not self.branching:
            return []
        branches = [(i, runner_up) for i in self.policy.place_branches(self.confidences)
                    if (runner_up := second_best(logits[i], tokens[i])) >= 0]
        self.branched = [i for i, _ in branches]
        return branches


def second_best(logits: torch.Tensor, best: int) -> int:
    """The id with the highest logit after ``best``; -1 when no other id is possible."""
    others = logits.clone()  # a copy and first_argmax: a quarter of what topk(2) took
    others[best] = float("-inf")
    runner_up = int(first_argmax(others))
    return runner_up if others[runner_up] > float("-inf") else -1


def find_continuation(context: Sequence[int], ngram: int, k: int) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the last ``ngram`` tokens."""
    if len(context) <= ngram:
        return []
    ids = np.asarray(context)
    windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], ngram)
    starts = np.flatnonzero((windows == ids[-ngram:]).all(axis=1))
    if starts.size == 0:
        return []
    follow = int(starts[-1]) + ngram
    return [int(t) for t in ids[follow : follow + k]]


class PromptLookupDrafter:
    name = "prompt-lookup"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, policy: DraftPolicy | None = None,
                 span: int = 0) -> None:
        """``policy``, if given, caps each copy at the length with the best expected tokens/s.

        A copy costs nothing to draft, but every copied token is one more row in the verify pass,
        so a lookup that keeps guessing wrong should propose less (or nothing, in a hybrid).
        ``span`` is the longest copy, in place of the ``k`` a step asks for (0: ``k``).
        """
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.policy = policy
        self.span = span

    def observe(self, record: StepRecord, source: str) -> None:
        if self.policy is not None and source == self.name:
            self.policy.observe(record)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        k = self.span or k
        if self.policy is not None:
            k = self.policy.choose(k)
        return Draft(self.continuation(context, k) if k else [], source=self.name)

    def continuation(self, context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens copied after the longest n-gram match of the context's end, if any."""
        for ngram in range(self.max_ngram, self.min_ngram - 1, -1):
            tokens = find_continuation(context, ngram, k)
            if tokens:
                return tokens
        return []


class HybridDrafter:
    name = "hybrid"

    def __init__(self, lookup: PromptLookupDrafter, model: ModelDrafter,
                 copy_policy: DraftPolicy | None = None) -> None:
        """``copy_policy``, if given (and the model has a policy too), lets a copy follow a model draft.

        A model draft's last tokens sometimes start a run the conversation already holds (a name, a line
        being rewritten); a copy of what followed it there costs no draft tokens, only verify rows,
        so it goes after the draft for as long as ``copy_policy`` expects its tokens to pay for
        their rows (see ``DraftPolicy.copy_length``), learning how often such copies are kept.
        """
        self.lookup = lookup
        self.model = model
        self.copy_policy = copy_policy
        #: Tokens of the latest draft that the model drafted, and that a copy after them added.
        self.modelled, self.copied = 0, 0

    def observe(self, record: StepRecord, source: str) -> None:
        self.lookup.observe(record, source)
        if source != self.model.name or not self.copied:
            self.model.observe(record, source)
            return
        # The model's policy learns from its own tokens (and their cost), the copy's from the copy,
        # judged only where the target kept the whole model draft.
        modelled = min(self.modelled, record.drafted)
        self.model.observe(replace(record, drafted=modelled, accepted=min(record.accepted, modelled)), source)
        chain = record.accepted - record.branch_kept
        if self.copy_policy is not None and modelled <= chain and modelled < record.drafted:
            copied = replace(record, drafted=record.drafted - modelled, accepted=chain - modelled, draft_s=0.0)
            self.copy_policy.observe(copied)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        self.modelled, self.copied = 0, 0
        draft = self.lookup.propose(context, k, sampler)
        if draft.tokens:
            return draft
        draft = self.model.propose(context, k, sampler)
        self.modelled = len(draft.tokens)
        return self._with_copy(context, draft, k)

    def _with_copy(self, context: Sequence[int], draft: Draft, k: int) -> Draft:
        """``draft`` and then as much of a copy of what followed it in the context as pays."""
        if self.copy_policy is None or self.model.policy is None or not draft.tokens:
            return draft
        policy = self.model.policy
        copy = self.lookup.continuation([*context, *draft.tokens], self.lookup.span or k)
        rows = len(draft.tokens) + 1 + len(draft.branches)
        reached = policy.chain_kept(self.model.confidences)
        self.copied = self.copy_policy.copy_length(reached, policy.rate, rows, len(copy))
        if not self.copied:
            return draft
        copy = copy[: self.copied]
        probs = draft.probs
        if probs is not None:  # a copied token is proposed for certain
            probs = torch.cat([probs, one_hot_rows(torch.tensor(copy), probs.shape[-1]).to(probs.dtype)])
        return Draft([*draft.tokens, *copy], probs, draft.source, draft.branches)


def copies_of(drafter: Drafter | None) -> Drafter | None:
    """What of ``drafter`` drafts without a model's pass: its prompt-lookup copies (None: nothing)."""
    if isinstance(drafter, HybridDrafter):
        return drafter.lookup
    return drafter if isinstance(drafter, PromptLookupDrafter) else None
