"""Per-step records and the summary of a run; plain data shared by the TUI, the bench and tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import fmean


@dataclass(frozen=True)
class StepRecord:
    """One draft -> verify round."""

    drafted: int
    accepted: int
    emitted: int
    draft_s: float
    #: The target's pass over the block and the acceptance check after it.
    verify_s: float
    #: The acceptance check alone (part of ``verify_s``).
    accept_s: float = 0.0
    #: The target was unavailable: the draft model alone wrote this step's token, unverified.
    degraded: bool = False
    #: The draft failed, so this step was the target's alone.
    draft_failed: bool = False
    #: Branches verified beside the draft (extra rows of the target's pass), and whether one was kept
    #: (it is then the last of the ``accepted`` tokens).
    branches: int = 0
    branch_kept: bool = False
    #: The reply's first step: its pass read the prompt (what the cache did not hold of it) and at most a
    #: copy from it, no model draft, and gave the first token. The per-step means leave it out.
    prompt: bool = False

    @property
    def rows(self) -> int:
        """Rows of the verify pass: the last token, the drafts, the branches."""
        return self.drafted + 1 + self.branches

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s


@dataclass(frozen=True)
class RunSummary:
    """What one reply cost and how much the draft helped."""

    mode: str
    prompt_tokens: int
    new_tokens: int
    steps: int
    drafted: int
    accepted: int
    seconds: float
    ttft_s: float
    finish_reason: str
    mean_draft_ms: float
    mean_verify_ms: float
    position_acceptance: tuple[float, ...] = field(default=())
    #: Tokens the draft model wrote alone while the target was unavailable (never verified).
    degraded_tokens: int = 0
    #: Target passes that failed (each retried or replaced by a degraded step) and draft passes that did.
    target_failures: int = 0
    draft_failures: int = 0
    #: Why the reply degraded or stopped early because a model failed; None when nothing failed.
    failure: str | None = None

    @property
    def degraded(self) -> bool:
        return self.degraded_tokens > 0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted; None when nothing was drafted (target-only)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted(self) -> float:
        """Drafted tokens accepted per step."""
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def position_acceptance(records: Sequence[StepRecord]) -> tuple[float, ...]:
    """For each draft position i (0-based), the share of steps that drafted i that kept it."""
    depth = max((r.drafted for r in records), default=0)
    reached = [0] * depth
    kept = [0] * depth
    for record in records:
        for i in range(record.drafted):
            reached[i] += 1
            kept[i] += i < record.accepted
    return tuple(k / n for k, n in zip(kept, reached, strict=True))


def acceptance_histogram(records: Sequence[StepRecord]) -> list[int]:
    """Steps that drafted, by how many drafted tokens they kept (index i counts steps that kept i)."""
    drafting = [r for r in records if r.drafted]
    counts = [0] * (max((r.drafted for r in drafting), default=0) + 1)
    for record in drafting:
        counts[record.accepted] += 1
    return counts if drafting else []


def summarize(
    records: Sequence[StepRecord],
    *,
    mode: str,
    prompt_tokens: int,
    seconds: float,
    ttft_s: float,
    finish_reason: str,
    target_failures: int = 0,
    draft_failures: int = 0,
    failure: str | None = None,
) -> RunSummary:
    decoding = [r for r in records if not r.prompt]
    return RunSummary(
        mode=mode,
        prompt_tokens=prompt_tokens,
        new_tokens=sum(r.emitted for r in records),
        steps=len(records),
        drafted=sum(r.drafted for r in records),
        accepted=sum(r.accepted for r in records),
        seconds=seconds,
        ttft_s=ttft_s,
        finish_reason=finish_reason,
        mean_draft_ms=1000 * fmean(r.draft_s for r in decoding) if decoding else 0.0,
        mean_verify_ms=1000 * fmean(r.verify_s for r in decoding) if decoding else 0.0,
        position_acceptance=position_acceptance(records),
        degraded_tokens=sum(r.emitted for r in records if r.degraded),
        target_failures=target_failures,
        draft_failures=draft_failures,
        failure=failure,
    )
