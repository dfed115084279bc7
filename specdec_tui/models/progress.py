"""Progress reports while a model is fetched, packed or loaded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    model: str
    stage: str
    done: float
    total: float | None = None
    detail: str = ""


ProgressFn = Callable[[Progress], None]


def no_progress(_: Progress) -> None:
    pass
