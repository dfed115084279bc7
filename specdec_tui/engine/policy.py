"""How many tokens a drafter should draft next: the K that maximises expected tokens/s.

A step drafts k tokens (each costing ``draft_cost``) and verifies k + 1 positions (``verify(k+1)``).
If each draft is accepted with probability alpha, in order, the step emits
E(k) = (1 - alpha^(k+1)) / (1 - alpha) tokens. The policy picks argmax_k E(k) / (k c + v(k+1)),
so a poor draft backs off to k = 0 (a plain target step) and a good one drafts deep. All three
quantities are estimated online from the steps just taken; the verify costs are shared by
all drafters (see ``VerifyCost``).

Greedy drafts can also offer branches: the draft's runner-up token at a drafted position,
verified as an extra row of the same pass and kept where the chain stops there and the target
agrees with it (on average with probability h, learnt the same way). Before drafting, the policy
picks k and a branch count b together for the most tokens/s, reckoning b branches at the first
positions to add h * sum_{i<b} alpha^i (1 - alpha) tokens for the cost of v(k+1+b) instead of
v(k+1): a shorter draft with branches where drafts are often rejected, no branches where extra
rows are dear.

Within a step, a model draft also knows how sure it is of each token it drafts, and that says far
more about whether the target will keep it than the average alpha does (on the bundled suite, 0.99
of drafted tokens the draft gave at least 0.9 were kept, 0.1-0.4 of those it gave under 0.4). So
the draft goes on token by token while the next one is expected to add tokens at least at the rate
the policy expects of a step (``keep_drafting``), up to the step's K, with the acceptance at each
confidence learnt online (``AcceptanceByConfidence``). Once the draft ends, its branches go where
it doubted (``place_branches``): at each position where a branch's expected extra token, from the
confidences of the tokens up to it and how often a branch at that confidence was kept, pays for
its verify row at the policy's rate. A copy that follows a model draft (``copy_length``) is weighed
the same way: each copied token while the chance that the target reaches and keeps it pays for
its row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specdec_tui.engine.metrics import StepRecord


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one step emits when each of ``k`` drafts is kept with probability ``alpha``, in order."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def best_k(alpha: float, draft_cost: float, verify_cost: Callable[[int], float], k_max: int) -> int:
    """The draft length in 0..k_max with the most expected tokens per second."""
    return max(range(k_max + 1), key=lambda k: expected_tokens(alpha, k) / (k * draft_cost + verify_cost(k + 1)))


def branch_gain(alpha: float, hit: float, branches: int) -> float:
    """Expected extra tokens a step gains from branches at its first ``branches`` positions: the chain
    stops at position i with probability alpha^i (1 - alpha), and there a branch is kept with
    probability ``hit``."""
    return hit * sum(alpha**i * (1.0 - alpha) for i in range(branches))


def best_plan(alpha: float, hit: float, draft_cost: float, verify_cost: Callable[[int], float],
              k_max: int) -> tuple[int, int]:
    """The draft length k in 0..k_max and branch count b in 0..k with the most expected tokens per second."""
    plans = [(k, b) for k in range(k_max + 1) for b in range(k + 1)]
    return max(plans, key=lambda plan: (expected_tokens(alpha, plan[0]) + branch_gain(alpha, hit, plan[1]))
               / (plan[0] * draft_cost + verify_cost(plan[0] + 1 + plan[1])))


def _ema(old: float | None, new: float, weight: float = 0.3) -> float:
    return new if old is None else (1 - weight) * old + weight * new


#: The most one measurement may exceed what its estimate expected: a pass that another process or
#: the OS slowed would otherwise set a cost for as long as that dearness keeps the policy away from
#: measuring it again.
MOST_OVER_EXPECTED = 1.25


#: How far (in positions) the context may move from where a row count's cost was last measured
#: before that measurement is forgotten. Every row of a pass attends to the whole context, so the
#: costs grow with it: on the Zen 4 a pass over 9 rows took 56 ms after 100 positions and 170-185 ms
#: after 8,000. A table kept from a chat's short first replies still said 91 ms for it at the end
#: of a reply there, since it caps a row count at the cheapest figure of any over more rows and
#: clips each pass to a quarter over what it expected; so it drafted as deep as at the start.
FORGET_AFTER_POSITIONS = 512


class VerifyCost:
    """Seconds one target pass over a number of rows takes, learnt from every step of every mode.

    The cost belongs to the target, not to a drafter, so all drafters' policies read one table. A
    row count's cost holds for the context it was measured at: it is forgotten once the context is
    ``forget_after`` positions from there (``FORGET_AFTER_POSITIONS``).
    """

    def __init__(self, forget_after: int = FORGET_AFTER_POSITIONS) -> None:
        self.measured: dict[int, float] = {}
        #: The context length at each row count's latest measurement.
        self.measured_at: dict[int, int] = {}
        self.forget_after = forget_after

    def observe(self, record: StepRecord, context: int = 0) -> None:
        """Average in one pass over ``record.rows`` rows after ``context`` positions, first
        forgetting the row counts last measured more than ``forget_after`` positions away, then
        clipping the pass to within a quarter of what the table expected of it
        (``MOST_OVER_EXPECTED``, and as much below it). A row count's first pass is only held to at
        most a quarter over the table's guess: nothing makes a pass cheaper than its work, so a
        first pass under the guess is believed (for fewer rows than measured, the guess is the most
        they can cost)."""
        for rows in [rows for rows, at in self.measured_at.items() if abs(context - at) > self.forget_after]:
            self.measured.pop(rows, None)
            del self.measured_at[rows]
        seconds = record.verify_s
        if self.measured:
            expected = self(record.rows)
            least = expected / MOST_OVER_EXPECTED if record.rows in self.measured else 0.0
            seconds = min(max(seconds, least), expected * MOST_OVER_EXPECTED)
        self.measured[record.rows] = _ema(self.measured.get(record.rows), seconds)
        self.measured_at[record.rows] = context

    def __call__(self, rows: int) -> float:
        """Measured for ``rows``, else on a line through the measurements (below the fewest rows
        measured, what those cost); never more than a pass over more rows was measured to cost
        (such a measurement is noise, and a stale one would steer every choice away from that row
        count)."""
        estimate = self.measured[rows] if rows in self.measured else self._on_line(rows)
        return min([estimate, *(seconds for measured, seconds in self.measured.items() if measured > rows)])

    def extra_row(self, rows: int) -> float:
        """Seconds one more row adds to a pass over ``rows``: the slope over the three rows from
        ``rows - 1`` to ``rows + 2`` (never less than nothing).

        The difference of two neighbouring row counts' costs swings with either's noise, and the
        curve has steps where the products start another pass over the weights (at 6 rows with
        AVX2's five-row passes); charged to one row, such a step, or a row count learnt dear,
        stops drafts just before it, so the row counts past it are rarely measured again and stay
        as dear as they were once learnt. Over a span, each row pays its share of the step.
        """
        low, high = max(rows - 1, 1), rows + 2
        return max((self(high) - self(low)) / (high - low), 0.0)

    def _on_line(self, rows: int) -> float:
        known = sorted(self.measured.items())
        if not known:
            return 1.0
        # A pass over a few rows is bound by reading the weights, so fewer rows than any measured
        # cost about what the fewest did. The line continued below a reply's first pass (9 rows)
        # put one row at a fifth of it; each plain step's pass, clipped to within a quarter of that
        # guess, raised it by under a tenth, and the policy, thinking plain steps cheap, drafted
        # less for whole replies.
        if rows < known[0][0]:
            return known[0][1]
        if len(known) == 1:
            (m, t), slope = known[0], 0.1 * known[0][1]  # a prior: each extra row costs 10% of one
        else:
            (m0, t0), (m, t) = known[0], known[-1]
            slope = max((t - t0) / (m - m0), 0.0)
        return max(t + slope * (rows - m), 1e-6)


class AcceptanceByConfidence:
    """How often the target keeps a drafted token (or a branch), by the probability the draft gave
    the drafted token (in ``bins`` equal bins), from decayed counts that start at ``prior``, or where
    that is None at "kept as often as the draft is sure"."""

    def __init__(self, bins: int = 10, decay: float = 0.98, prior_weight: float = 2.0,
                 prior: float | None = None) -> None:
        self.decay = decay
        self.kept = [prior_weight * ((i + 0.5) / bins if prior is None else prior) for i in range(bins)]
        self.judged = [prior_weight] * bins

    def _bin(self, confidence: float) -> int:
        return min(max(int(confidence * len(self.kept)), 0), len(self.kept) - 1)

    def __call__(self, confidence: float) -> float:
        i = self._bin(confidence)
        return self.kept[i] / self.judged[i]

    def observe(self, confidences: Sequence[float], kept: int) -> None:
        """The first ``kept`` drafted tokens were kept and the next one, if any, rejected; the rest
        were never judged."""
        for position, confidence in enumerate(confidences[: kept + 1]):
            self.record(confidence, position < kept)

    def record(self, confidence: float, kept: bool) -> None:
        i = self._bin(confidence)
        self.kept[i] = self.decay * self.kept[i] + kept
        self.judged[i] = self.decay * self.judged[i] + 1


class DraftPolicy:
    """One drafter's online estimates of acceptance and draft cost, and the K they imply.

    Acceptance is estimated from decayed counts of kept drafts and of rejections (each step ends
    at its first rejection, so kept / (kept + rejections) is the per-token rate). When the policy
    stops drafting it probes every ``probe_every`` steps, so it can notice the draft getting
    better again: a copy of one token, or a model draft that goes on only while ``keep_drafting``
    says its next token pays.
    """

    def __init__(self, verify_cost: VerifyCost, decay: float = 0.9, prior_alpha: float = 0.7,
                 prior_weight: float = 2.0, probe_every: int = 6, prior_hit: float = 0.5) -> None:
        self.verify_cost = verify_cost
        self.decay = decay
        self.kept = prior_alpha * prior_weight
        self.rejected = (1.0 - prior_alpha) * prior_weight
        #: Decayed counts of branches kept and not kept where the draft was rejected at a branch.
        self.branch_hits = prior_hit * prior_weight
        self.branch_misses = (1.0 - prior_hit) * prior_weight
        self.draft_cost: float | None = None
        #: Tokens per second the latest plan expects of a step.
        self.rate: float | None = None
        self.by_confidence = AcceptanceByConfidence()
        #: How often a branch is kept where the target rejects the drafted token, by the draft's
        #: confidence in that token (a doubted token's runner-up is often the target's choice).
        self.branch_hit_by_confidence = AcceptanceByConfidence(prior=prior_hit)
        self.probe_every = probe_every
        self.idle_steps = 0

    @property
    def alpha(self) -> float:
        return self.kept / (self.kept + self.rejected)

    @property
    def branch_hit(self) -> float:
        """How often a rejected draft token's branch is what the target wanted."""
        return self.branch_hits / (self.branch_hits + self.branch_misses)

    def choose(self, k_max: int) -> int:
        return self.plan(k_max)[0]

    def plan(self, k_max: int, branching: bool = False) -> tuple[int, int]:
        """The next draft's length and, where ``branching``, how many of its first positions offer a
        branch (none before a draft cost is known); ``rate`` becomes its expected tokens per second."""
        if self.draft_cost is None:
            return k_max, 0
        if branching:
            k, b = best_plan(self.alpha, self.branch_hit, self.draft_cost, self.verify_cost, k_max)
        else:
            k, b = best_k(self.alpha, self.draft_cost, self.verify_cost, k_max), 0
        self.rate = ((expected_tokens(self.alpha, k) + branch_gain(self.alpha, self.branch_hit, b))
                     / (k * self.draft_cost + self.verify_cost(k + 1 + b)))
        if k == 0:
            self.idle_steps += 1
            if self.idle_steps >= self.probe_every:
                self.idle_steps = 0
                return 1, 0
        else:
            self.idle_steps = 0
        return k, b

    def keep_drafting(self, confidences: Sequence[float], branches: int) -> bool:
        """Whether to draft one more token after tokens the draft gave ``confidences``: whether that
        token is expected to add tokens at least at the rate the policy expects of a step (the
        chance that the whole chain so far and the next token are kept, per second the next one
        adds). A rate of this step's own would stop a step of sure tokens too soon.

        ``branches`` is how many branches the plan expects the step to verify (at most one per
        drafted token; where they go is decided once the draft ends).
        """
        if self.draft_cost is None or self.rate is None:
            return True
        drafted = len(confidences)
        rows = drafted + 1 + min(branches, drafted)
        extra_seconds = self.draft_cost + self.verify_cost.extra_row(rows)
        return self.chain_kept(confidences) * self.alpha >= self.rate * extra_seconds

    def chain_kept(self, confidences: Sequence[float]) -> float:
        """The chance that the target keeps every drafted token the draft gave ``confidences``."""
        chain = 1.0
        for confidence in confidences:
            chain *= self.by_confidence(confidence)
        return chain

    def copy_length(self, reached: float, rate: float | None, rows: int, most: int) -> int:
        """How many of ``most`` copied tokens to verify after a draft, in a pass of ``rows`` rows so
        far, where the target reaches the copy (keeps the whole draft) with probability ``reached``:
        each next copied token while its chance of being kept (``reached``, then this policy's
        alpha per copied token) pays for its verify row at ``rate`` (the draft's policy's tokens per
        second). A copy costs nothing to draft, only rows. Where none pays, one token is verified
        every ``probe_every`` such copies, so the policy can see copies getting better."""
        if rate is None or most == 0:
            return 0
        length, kept = 0, reached
        while length < most:
            kept *= self.alpha
            if kept < rate * self.verify_cost.extra_row(rows + length):
                break
            length += 1
        self.idle_steps = 0 if length else self.idle_steps + 1
        if self.idle_steps >= self.probe_every:
            self.idle_steps, length = 0, 1
        return length

    def place_branches(self, confidences: Sequence[float]) -> list[int]:
        """The drafted positions whose runner-up is worth a verify row, given the draft's
        ``confidences``: a branch at i adds a token when the chain is kept up to i, draft i is
        rejected and the branch kept; positions are taken by that expected gain while it is at least
        the tokens the policy's rate expects of the extra row's seconds."""
        if self.rate is None:
            return []
        gains, chain = [], 1.0
        for position, confidence in enumerate(confidences):
            kept = self.by_confidence(confidence)
            gains.append((chain * (1.0 - kept) * self.branch_hit_by_confidence(confidence), position))
            chain *= kept
        chosen: list[int] = []
        rows = len(confidences) + 1
        for gain, position in sorted(gains, reverse=True):
            if gain < self.rate * self.verify_cost.extra_row(rows):
                break
            chosen.append(position)
            rows += 1
        return sorted(chosen)

    def observe(self, record: StepRecord, cost_is_typical: bool = True,
                confidences: Sequence[float] = (), branched: Sequence[int] = ()) -> None:
        """Learn from a step that verified this policy's drafter's draft.

        ``cost_is_typical`` is False when the draft time includes reading tokens first (a prompt, or
        the tokens of steps it did not draft): such a time only bounds the draft cost from above.
        A typical one moves the cost up by at most ``MOST_OVER_EXPECTED``; a cheaper one is believed,
        as nothing makes a draft cheaper than its work. ``confidences`` are the draft's
        probabilities of the tokens it drafted, where it knows them; ``branched`` the drafted
        positions that had a branch.
        """
        if record.drafted == 0:
            return
        chain_kept = record.accepted - record.branch_kept
        if confidences:
            self.by_confidence.observe(confidences, chain_kept)
        self.kept = self.decay * self.kept + chain_kept
        self.rejected = self.decay * self.rejected + (chain_kept < record.drafted)
        if chain_kept < record.drafted and chain_kept in branched:
            self.branch_hits = self.decay * self.branch_hits + record.branch_kept
            self.branch_misses = self.decay * self.branch_misses + (not record.branch_kept)
            if confidences:
                self.branch_hit_by_confidence.record(confidences[chain_kept], record.branch_kept)
        seconds = record.draft_s / record.drafted
        if self.draft_cost is None:
            self.draft_cost = seconds if cost_is_typical else None
        elif cost_is_typical:
            self.draft_cost = _ema(self.draft_cost, min(seconds, self.draft_cost * MOST_OVER_EXPECTED))
        elif seconds < self.draft_cost:
            # Reading tokens first only adds time, so even such a draft was cheaper than the estimate.
            # Without this a policy that stopped drafting would never learn otherwise: its probes
            # come after steps the draft did not read.
            self.draft_cost = _ema(self.draft_cost, seconds)
