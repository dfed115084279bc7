"""The paired lever run for what one more verify row costs (this folder's README, "One more row's cost, over a
span, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid), each variant and target-only
with an engine of its own over the one loaded pair. Two engines of each table run side by side, so
the spread between identical engines (their draft lengths settle from their own histories) is
measured in the same run as the change. Variants:

- A, B: one more row costs the difference of the two neighbouring row counts' learnt costs (the
  table before this change);
- W, X: the package's table now: one more row costs the slope over the three rows around it.

Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-04-span-extra-row.py A B W     (then A W B X, then W A X B)
The runs together, per prompt the mean of W and X over the mean of A and B:
     .venv/bin/python docs/benchmarks/2026-12-04-span-extra-row.py --combine docs/benchmarks/2026-12-04-span-extra-row-*.txt
The outputs are 2026-12-04-span-extra-row-1.txt, -2.txt and -3.txt beside this file; each line ends with
the table the variant's engine held after the reply (ms for 1-9 rows). The first two were taken
with this script's two tables the other way round (the package's table then the neighbour
difference, the span a subclass), the same code; the third with this script.
"""

from __future__ import annotations

import sys

from paired_levers import (
    Reply,
    combine,
    engine_with,
    hybrid_reply,
    interleaved,
    print_paired,
    two_engine_pairs,
)

from specdec_tui.config import Settings
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.runtime import load_runtime


class NeighbourVerifyCost(VerifyCost):
    """The table before this change: one more row costs what its row count's learnt cost exceeds
    the one below's."""

    def extra_row(self, rows: int) -> float:
        return max(self(rows + 1) - self(rows), 0.0)


if sys.argv[1:2] == ["--combine"]:
    combine(sys.argv[2:])
    sys.exit()

TABLES = {"A": NeighbourVerifyCost, "B": NeighbourVerifyCost, "W": VerifyCost, "X": VerifyCost}
VARIANTS = [name for name in sys.argv[1:] if name in TABLES] or ["A", "B", "W"]
runtime = load_runtime(Settings())


engines = {name: engine_with(runtime, TABLES.get(name)) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    tokens, summary, details = hybrid_reply(runtime, engines[name], ids, name)
    if name != "target":
        table = engines[name].decoder.verify_cost
        details += " table " + " ".join(f"{rows}:{table(rows) * 1000:.0f}" for rows in range(1, 10))
    return tokens, summary, details


old, new = [v for v in VARIANTS if v in "AB"], [v for v in VARIANTS if v in "WX"]
print_paired(interleaved(runtime, VARIANTS, run), two_engine_pairs(new, old))
