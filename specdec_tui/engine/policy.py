"""How many tokens a drafter should draft next: the K that maximises expected tokens/s.

A step drafts k tokens (each costing ``draft_cost``) and verifies k + 1 positions (``verify(k+1)``).
If each draft is accepted with probability alpha, in order, the step emits
E(k) = (1 - alpha^(k+1)) / (1 - alpha) tokens. The policy picks argmax_k E(k) / (k c + v(k+1)),
so a poor draft backs off to k = 0 (a plain target step) and a good one drafts deep. All three
quantities are estimated online from the steps just taken; the verify costs are shared by
all drafters (see ``VerifyCost``).
"""

from __future__ import annotations

from collections.abc import Callable

from specdec_tui.engine.metrics import StepRecord


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one step emits when each of ``k`` drafts is kept with probability ``alpha``, in order."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def best_k(alpha: float, draft_cost: float, verify_cost: Callable[[int], float], k_max: int) -> int:
    """The draft length in 0..k_max with the most expected tokens per second."""
    return max(range(k_max + 1), key=lambda k: expected_tokens(alpha, k) / (k * draft_cost + verify_cost(k + 1)))


def _ema(old: float | None, new: float, weight: float = 0.3) -> float:
    return new if old is None else (1 - weight) * old + weight * new


class VerifyCost:
    """Seconds one target pass over a number of rows takes, learnt from every step of every mode.

    The cost belongs to the target, not to a drafter, so all drafters' policies read one table.
    """

    def __init__(self) -> None:
        self.measured: dict[int, float] = {}

    def observe(self, record: StepRecord) -> None:
        rows = record.drafted + 1
        self.measured[rows] = _ema(self.measured.get(rows), record.verify_s)

    def __call__(self, rows: int) -> float:
        """Measured for ``rows``, else on a line through the measurements."""
        if rows in self.measured:
            return self.measured[rows]
        known = sorted(self.measured.items())
        if not known:
            return 1.0
        if len(known) == 1:
            (m, t), slope = known[0], 0.1 * known[0][1]  # a prior: each extra row costs 10% of one
        else:
            (m0, t0), (m, t) = known[0], known[-1]
            slope = max((t - t0) / (m - m0), 0.0)
        return max(t + slope * (rows - m), 1e-6)


class DraftPolicy:
    """One drafter's online estimates of acceptance and draft cost, and the K they imply.

    Acceptance is estimated from decayed counts of kept drafts and of rejections (each step ends
    at its first rejection, so kept / (kept + rejections) is the per-token rate). When the policy
    stops drafting it probes with one token every ``probe_every`` steps, so it can notice the
    draft getting better again.
    """

    def __init__(self, verify_cost: VerifyCost, decay: float = 0.9, prior_alpha: float = 0.7,
                 prior_weight: float = 2.0, probe_every: int = 6) -> None:
        self.verify_cost = verify_cost
        self.decay = decay
        self.kept = prior_alpha * prior_weight
        self.rejected = (1.0 - prior_alpha) * prior_weight
        self.draft_cost: float | None = None
        self.probe_every = probe_every
        self.idle_steps = 0

    @property
    def alpha(self) -> float:
        return self.kept / (self.kept + self.rejected)

    def choose(self, k_max: int) -> int:
        if self.draft_cost is None:
            return k_max
        k = best_k(self.alpha, self.draft_cost, self.verify_cost, k_max)
        if k == 0:
            self.idle_steps += 1
            if self.idle_steps >= self.probe_every:
                self.idle_steps = 0
                return 1
        else:
            self.idle_steps = 0
        return k

    def observe(self, record: StepRecord, cost_is_typical: bool = True) -> None:
        """Learn from a step that verified this policy's drafter's draft.

        ``cost_is_typical`` is False when the draft time includes reading a prompt.
        """
        if record.drafted == 0:
            return
        self.kept = self.decay * self.kept + record.accepted
        self.rejected = self.decay * self.rejected + (record.accepted < record.drafted)
        if cost_is_typical:
            self.draft_cost = _ema(self.draft_cost, record.draft_s / record.drafted)
