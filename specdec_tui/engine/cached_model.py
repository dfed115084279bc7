"""A causal LM together with its KV cache and the token ids that cache holds.

Rollback is implicit: every call names the whole sequence it wants scored, the cache is cropped to
the longest prefix it shares with that sequence, and only the rest is fed. After a rejected draft
the next call simply no longer contains the rejected tokens; after a kept branch (a runner-up
token verified beside the draft) it contains the branch, which is fed again like any new token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import torch

#: ``(j, token)``: a token verified in place of the j-th drafted token, in the same pass.
Branch = tuple[int, int]


class Runner(Protocol):
    """A model that appends tokens to its own KV cache and can forget the cache's tail."""

    #: Token ids below this have an input embedding.
    input_vocab: int

    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        """Append ``ids``; return logits (n_logits, vocab) after each of the last ``n_logits``."""
        ...

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached positions."""
        ...

    def reset(self) -> None:
        ...


class BranchingRunner(Runner, Protocol):
    """A runner that also scores branches: tokens in place of drafted ones, in the same pass."""

    supports_branches: bool

    def forward(self, ids: list[int], n_logits: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        """``Runner.forward``, then one more logits row per branch: a branch ``(j, token)`` stands in
        for ``ids[-n_logits + 1 + j]``, seeing only what comes before it; its keys are not kept."""
        ...


class DroppingRunner(Runner, Protocol):
    """A runner that can forget positions from the middle of its cache, the later ones keeping theirs."""

    drops_positions: bool

    def drop(self, at: int, count: int) -> None:
        """Forget the ``count`` positions from cache index ``at`` on (those held); from index ``at`` on, held
        or fed later, a position is ``count`` past its index."""
        ...


class WrappedRunner:
    """A runner around another: the cache and vocabulary are the inner one's; subclasses change ``forward``."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    @property
    def input_vocab(self) -> int:
        return self.runner.input_vocab

    @property
    def supports_branches(self) -> bool:
        return supports_branches(self.runner)

    @property
    def drops_positions(self) -> bool:
        return drops_positions(self.runner)

    def forward(self, ids: list[int], n_logits: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        return forward(self.runner, ids, n_logits, branches)

    def crop(self, length: int) -> None:
        self.runner.crop(length)

    def drop(self, at: int, count: int) -> None:
        cast(DroppingRunner, self.runner).drop(at, count)

    def reset(self) -> None:
        self.runner.reset()


def supports_branches(runner: Runner) -> bool:
    return bool(getattr(runner, "supports_branches", False))


def drops_positions(runner: Runner) -> bool:
    return bool(getattr(runner, "drops_positions", False))


def forward(runner: Runner, ids: list[int], n_logits: int, branches: Sequence[Branch]) -> torch.Tensor:
    """``runner``'s pass, with ``branches`` only where there are some (plain runners take none)."""
    if branches:
        return runner.forward(ids, n_logits, branches)  # type: ignore[call-arg]
    return runner.forward(ids, n_logits)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where the two outputs differ, None when identical."""
    n = common_prefix_length(a, b)
    return None if n == len(a) == len(b) else n


#: What a windowed model (``CachedModel.window``) always reads of a long context: its first tokens,
#: the system message and the start of the first user message.
WINDOW_SINK = 32
#: How far a window's start moves at a time: the cache drops that many positions at once.
WINDOW_STEP = 1024
#: The most tokens a step drafts past the context (``DecodingSettings.k``'s bound).
MOST_DRAFTED = 32


class CachedModel:
    def __init__(self, runner: Runner, window: int = 0) -> None:
        self.runner = runner
        #: Of a context longer than ``WINDOW_SINK + window + WINDOW_STEP`` tokens, read only the first
        #: ``WINDOW_SINK`` and the latest ``window`` to ``window + WINDOW_STEP`` (0: all of it). Only a
        #: draft may: its tokens are proposals, and a target's would not be the target's. Only a runner
        #: that drops positions can (others read all of it).
        self.window = window if drops_positions(runner) else 0
        #: Where the window's tokens start in the context (0: it reads all of it).
        self.window_start = 0
        # What the runner holds from earlier use is unknown here, so start from an empty cache.
        runner.reset()
        self.ids: list[int] = []
        #: How many tokens the latest forward pass fed (1 for a decode step, more for a prefill).
        self.last_fed = 0

    @property
    def input_vocab(self) -> int:
        return self.runner.input_vocab

    @property
    def supports_branches(self) -> bool:
        return supports_branches(self.runner)

    def reset(self) -> None:
        self.runner.reset()
        self.ids = []
        self.window_start = 0

    def view(self, ids: Sequence[int]) -> Sequence[int]:
        """What this model reads of ``ids``: all of them, or where a window has moved on
        (``move_window``) the first ``WINDOW_SINK`` and the rest from the window's start."""
        if not self.window_start or len(ids) < self.window_start:
            return ids
        return [*ids[:WINDOW_SINK], *ids[self.window_start :]]

    def move_window(self, length: int) -> None:
        """Set the window's start for a context of ``length`` tokens: nothing left out up to
        ``WINDOW_SINK + window + WINDOW_STEP`` tokens, then a start that moves ``WINDOW_STEP`` tokens
        at a time, leaving the latest ``window`` to ``window + WINDOW_STEP``. Where it moves on, the
        cache drops the positions it passed and keeps the rest where they are: every token read keeps
        its own position, and nothing is read again."""
        over = length - WINDOW_SINK - self.window
        start = WINDOW_SINK + over // WINDOW_STEP * WINDOW_STEP if self.window and over >= WINDOW_STEP else 0
        if start < self.window_start:  # a shorter context, another conversation's: read it afresh
            self.reset()
        if start > self.window_start:
            passed = start - max(self.window_start, WINDOW_SINK)
            cast(DroppingRunner, self.runner).drop(WINDOW_SINK, passed)
            del self.ids[WINDOW_SINK : WINDOW_SINK + passed]
        self.window_start = start

    def most_positions(self, length: int) -> int:
        """The most positions this model's cache holds of a context of ``length`` tokens: all of them,
        or with a window its first tokens, less than ``window + WINDOW_STEP`` and a step's drafts."""
        if not self.window:
            return length
        return min(length, WINDOW_SINK + self.window + WINDOW_STEP + MOST_DRAFTED)

    def _sync(self, ids: Sequence[int], keep_at_most: int) -> list[int]:
        """Crop the cache to what it shares with ``ids`` (at most ``keep_at_most``); return the rest."""
        keep = min(common_prefix_length(self.ids, ids), keep_at_most)
        if keep < len(self.ids):
            self.runner.crop(keep)
            del self.ids[keep:]
        return list(ids[keep:])

    def _forward(self, new: list[int], n_logits: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        try:
            logits = forward(self.runner, new, n_logits, branches)
        except BaseException:
            # A failed pass may have written part of its keys and values: forget them, so the
            # cache holds exactly ``self.ids`` again and the next call can simply retry.
            self.runner.crop(len(self.ids))
            raise
        self.ids.extend(new)
        self.last_fed = len(new)
        return logits

    def keep_shared(self, ids: Sequence[int]) -> None:
        """Crop the cache to what it shares with ``ids`` short of their last position, as a pass scoring
        ``ids`` would: what it holds past that is forgotten before the pass instead of in it."""
        ids = self.view(ids)
        self._sync(ids, len(ids) - 1)

    def prefill(self, ids: Sequence[int]) -> None:
        """Make the cache hold exactly what it reads of ``ids``."""
        ids = self.view(ids)
        new = self._sync(ids, len(ids))
        if new:
            self._forward(new, 1)

    def logits_for(self, ids: Sequence[int], n: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        """Next-token logits (n, vocab) after each of the last ``n`` positions of ``ids``, then a row
        after each branch (see ``BranchingRunner``); the cache keeps ``ids`` (what it reads of them),
        not the branches."""
        ids = self.view(ids)
        new = self._sync(ids, len(ids) - n)
        return self._forward(new, n, branches)
