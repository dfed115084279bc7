"""Fault injection: a runner wrapper that makes a real model misbehave on purpose.

For tests and for demonstrating the circuit breaker. A fault happens after the real pass has run,
so the model's cache already holds the pass's keys and values when it fails: the hardest case for
rollback. Off unless a fault is set (see ``[faults]`` in the settings).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import torch

from specdec_tui.engine.cached_model import Branch, Runner, WrappedRunner, forward


class Fault(StrEnum):
    RAISE = "raise"  # the pass raises
    NAN = "nan"  # the pass returns NaN logits
    HANG = "hang"  # the pass returns late


class InjectedFault(RuntimeError):
    """Raised by a pass that fault injection chose to fail."""


@dataclass(frozen=True)
class FaultRates:
    """Per-pass probabilities of each fault, and how long a hang lasts."""

    raise_: float = 0.0
    nan: float = 0.0
    hang: float = 0.0
    hang_ms: float = 3000.0

    @property
    def any(self) -> bool:
        return self.raise_ > 0 or self.nan > 0 or self.hang > 0


def random_faults(rates: FaultRates, seed: int) -> Callable[[], Fault | None]:
    """A seeded stream of faults, one draw per pass."""
    rng = random.Random(seed)

    def choose() -> Fault | None:
        draw = rng.random()
        for fault, rate in ((Fault.RAISE, rates.raise_), (Fault.NAN, rates.nan), (Fault.HANG, rates.hang)):
            if draw < rate:
                return fault
            draw -= rate
        return None

    return choose


class FaultyRunner(WrappedRunner):
    """``runner``, except that each pass may fail as ``choose`` decides."""

    def __init__(self, runner: Runner, choose: Callable[[], Fault | None], hang_ms: float = 3000.0) -> None:
        super().__init__(runner)
        self.choose = choose
        self.hang_ms = hang_ms
        #: How many of each fault were injected.
        self.injected: dict[Fault, int] = dict.fromkeys(Fault, 0)

    def forward(self, ids: list[int], n_logits: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        logits = forward(self.runner, ids, n_logits, branches)
        fault = self.choose()
        if fault is None:
            return logits
        self.injected[fault] += 1
        if fault is Fault.RAISE:
            raise InjectedFault("injected fault: the forward pass raised")
        if fault is Fault.NAN:
            return torch.full_like(logits, float("nan"))
        time.sleep(self.hang_ms / 1000)
        return logits
