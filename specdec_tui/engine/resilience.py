"""Circuit breakers around the models' forward passes, and the failures the decoder reacts to.

A ``GuardedRunner`` wraps one model's runner. Every forward pass goes through a pybreaker
``CircuitBreaker`` (one pass per call, never a whole reply, since the breaker holds its lock for
the length of a call). A pass that raises, returns NaN or +inf logits, or takes longer than the
step timeout counts as a failure and reaches the decoder as ``ModelFailure``; once ``fail_max``
failures in a row have opened the circuit, passes are refused at once as ``ModelUnavailable``
until ``reset_timeout`` has passed, then one trial pass decides (half-open).

The decoder never sees pybreaker: it reacts to these two exceptions (retry the step, or decode
from the draft model alone), and ``CachedModel`` puts the cache back as it was before a failed pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pybreaker
import torch

from specdec_tui.engine.cached_model import Branch, Runner, WrappedRunner, forward

#: Passes feeding more tokens than this read a prompt; those are not held to the step timeout.
TIMED_PASS_TOKENS = 64


class ModelFailure(RuntimeError):
    """A forward pass failed; nothing it computed was used."""


class ModelUnavailable(ModelFailure):
    """The model's circuit is open, so it was not called."""


@dataclass
class BreakerLog(pybreaker.CircuitBreakerListener):
    """What a breaker went through: its state changes in order, trips, and the latest failure."""

    name: str
    transitions: list[tuple[str, str]] = field(default_factory=list)
    trips: int = 0
    failures: int = 0
    last_failure: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def state_change(self, cb: pybreaker.CircuitBreaker, old_state: pybreaker.CircuitBreakerState | None,
                     new_state: pybreaker.CircuitBreakerState) -> None:
        with self.lock:
            self.transitions.append((old_state.name if old_state else "", new_state.name))
            self.trips += new_state.name == pybreaker.STATE_OPEN

    def failure(self, cb: pybreaker.CircuitBreaker, exc: BaseException) -> None:
        with self.lock:
            self.failures += 1
            self.last_failure = str(exc) or type(exc).__name__


class Breaker:
    """One model's circuit: a pybreaker ``CircuitBreaker`` and the log of what it went through."""

    def __init__(self, name: str, fail_max: int, reset_timeout: float) -> None:
        self.name = name
        self.log = BreakerLog(name)
        self.circuit = pybreaker.CircuitBreaker(fail_max=fail_max, reset_timeout=reset_timeout,
                                                listeners=[self.log], name=name,
                                                # A pass that trips the circuit is reported as the failure it was.
                                                throw_new_error_on_trip=False)

    @property
    def state(self) -> str:
        """'closed', 'open' or 'half-open'; read without the breaker's lock, so never waits on a pass."""
        return self.circuit.current_state

    @property
    def is_open(self) -> bool:
        return self.state == pybreaker.STATE_OPEN

    def why_open(self) -> str:
        return (f"the {self.name} model failed {self.circuit.fail_max} passes in a row "
                f"(last: {self.log.last_failure or 'unknown'})")


def bad_logits(logits: torch.Tensor) -> str | None:
    """Why ``logits`` cannot be decoded from, or None. -inf alone is fine (masked ids)."""
    # Each row's maximum is NaN, +inf or -inf exactly when the row holds a NaN, a +inf or nothing
    # finite: one pass over the logits decides the usual case, not three.
    if torch.isfinite(logits.amax(dim=-1)).all():
        return None
    if torch.isnan(logits).any():
        return "NaN logits"
    if torch.isposinf(logits).any():
        return "infinite logits"
    if torch.isneginf(logits).all(dim=-1).any():
        return "a row of logits with no finite value"
    return None


class GuardedRunner(WrappedRunner):
    """A runner whose every forward pass goes through ``breaker`` and is checked before use."""

    def __init__(self, runner: Runner, breaker: Breaker, step_timeout: float | None) -> None:
        super().__init__(runner)
        self.breaker = breaker
        self.step_timeout = step_timeout

    def _checked_forward(self, ids: list[int], n_logits: int, branches: Sequence[Branch]) -> torch.Tensor:
        started = time.perf_counter()
        logits = forward(self.runner, ids, n_logits, branches)
        elapsed = time.perf_counter() - started
        if problem := bad_logits(logits):
            raise ModelFailure(f"the {self.breaker.name} model returned {problem}")
        if self.step_timeout is not None and len(ids) <= TIMED_PASS_TOKENS and elapsed > self.step_timeout:
            raise ModelFailure(f"a {self.breaker.name} pass took {elapsed:.1f} s, over the "
                               f"{self.step_timeout:g} s step timeout")
        return logits

    def forward(self, ids: list[int], n_logits: int, branches: Sequence[Branch] = ()) -> torch.Tensor:
        try:
            return self.breaker.circuit.call(self._checked_forward, ids, n_logits, branches)
        except pybreaker.CircuitBreakerError as exc:
            raise ModelUnavailable(self.breaker.why_open()) from exc
        except ModelFailure:
            raise
        except Exception as exc:
            raise ModelFailure(f"the {self.breaker.name} model failed: {type(exc).__name__}: {exc}") from exc


@dataclass
class Breakers:
    """The circuits of a loaded pair: the target's, and the draft model's when one is loaded."""

    target: Breaker
    draft: Breaker | None = None

    def __iter__(self) -> Iterator[Breaker]:
        return iter([b for b in (self.target, self.draft) if b is not None])

    @property
    def degraded(self) -> bool:
        """Whether a circuit is open: replies are draft-only (target open) or target-only (draft open)."""
        return any(b.is_open for b in self)

    def why(self) -> str | None:
        """What is degraded and why, or None."""
        reasons = [b.why_open() for b in self if b.is_open]
        return "; ".join(reasons) or None
