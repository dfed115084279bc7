"""The verify-cost table's guess past the most rows it has measured, capped, paired against the package's line (not kept).

Where a pass over more rows than any measured is asked about, the table continues the line through
its fewest and most rows measured. After a jump in context it has forgotten the costs measured
before it (``FORGET_AFTER_POSITIONS``), and its first passes may be of 3 and 4 rows only, one of
them slowed: the line through those two put 9 rows at 218 ms where they took 154, so the policies
never drafted or copied as far as 9 rows and never measured them. ``CappedSlopeVerifyCost`` below
takes that slope only up to a tenth of the most rows' cost a row (the table's prior from one
measurement), so a row count past the measured ones is guessed low, tried and learnt.

- ``--jump`` (the default): as ``2026-12-07-stale-verify-costs.py --jump``: three short replies,
  then a pasted text of 8,000 tokens of this package's code and eight questions about it, 256 new
  tokens each; each side answers from a copy of the table and policies the short replies taught,
  both forgetting as the package does, the order alternating. The answers are asserted the same.
- ``--suite``: every suite prompt, 128 new tokens, fresh caches, target-only and each table's own
  engine (``before``, ``capped``) interleaved, the order rotating (the paired lever scripts' way).

Run: .venv/bin/python docs/benchmarks/2026-12-07-slope-past-measured.py [--jump | --suite]
"""

from __future__ import annotations

import copy
import sys
from statistics import median

from paired_levers import (
    Reply,
    engine_with,
    hybrid_reply,
    interleaved,
    paired_code_questions,
    pasted_after_short_replies,
    print_paired,
)

from specdec_tui.config import Settings
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.runtime import load_runtime


class CappedSlopeVerifyCost(VerifyCost):
    """Past the most rows measured, the line's slope at most a tenth of that pass a row."""

    def _on_line(self, rows: int) -> float:
        known = sorted(self.measured.items())
        if len(known) < 2 or rows <= known[-1][0]:
            return super()._on_line(rows)
        (m0, t0), (m, t) = known[0], known[-1]
        return t + min(max((t - t0) / (m - m0), 0.0), 0.1 * t) * (rows - m)


TABLES: dict[str, type[VerifyCost]] = {"before": VerifyCost, "capped": CappedSlopeVerifyCost}
runtime = load_runtime(Settings())


def jump() -> None:
    taught, pasted = pasted_after_short_replies(runtime, VerifyCost())

    def state(side: str) -> tuple[VerifyCost, dict]:
        table, policies = copy.deepcopy(taught)  # the policies read this copy of the table
        table.__class__ = TABLES[side]
        return table, policies

    ratios = paired_code_questions(runtime, pasted, ("before", "capped"), state)
    print(f"median capped / before {median(ratios):.3f} over {len(ratios)} questions; "
          f"lowest {min(ratios):.3f}, highest {max(ratios):.3f}")


def suite() -> None:
    engines = {name: engine_with(runtime, TABLES.get(name)) for name in ["target", *TABLES]}

    def run(ids: list[int], name: str) -> Reply:
        return hybrid_reply(runtime, engines[name], ids, name)

    print_paired(interleaved(runtime, list(TABLES), run), [("capped", "before")])


suite() if "--suite" in sys.argv else jump()
