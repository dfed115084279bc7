"""The paired lever run for what the verify-cost table thinks a pass over fewer rows than any it
has measured costs (this folder's README, "Fewer rows than measured, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid), each variant and target-only
with an engine of its own over the one loaded pair (an engine's table learns from every pass it
runs). Variants:

- L: the table as it was: below the fewest rows measured, the cost continues the line through the
  measurements (with one measurement, 10% of it a row), so after a reply's first step, a pass over
  9 rows, one row was thought to cost a fifth of that;
- F: below the fewest rows measured, the cost is what the fewest cost (a pass over few rows is
  bound by reading the weights, not by its rows), every pass clipped as in L;
- G (the package's table now): F, and a row count's first pass is clipped only from above (at a
  quarter over the table's guess), so a cheaper first pass is believed.

Every reply is asserted equal to target-only's.

With --fresh, every reply of a variant is the first of an engine of its own (a chat session's first
reply); target-only keeps one engine.

Run: .venv/bin/python docs/benchmarks/2026-12-04-fewer-rows-cost.py L F   (then L G, and L G --fresh)
The outputs are 2026-12-04-fewer-rows-cost-*.txt beside this file.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import VerifyCost, _ema
from specdec_tui.runtime import load_runtime


class LineBelowVerifyCost(VerifyCost):
    """The table before this change: the line through the measurements continues below them, and
    every pass, a row count's first too, is clipped to within a quarter of what the table expected."""

    def observe(self, record: StepRecord) -> None:
        seconds = record.verify_s
        if self.measured:
            expected = self(record.rows)
            seconds = min(max(seconds, expected / 1.25), expected * 1.25)
        self.measured[record.rows] = _ema(self.measured.get(record.rows), seconds)

    def _on_line(self, rows: int) -> float:
        known = sorted(self.measured.items())
        if not known:
            return 1.0
        if len(known) == 1:
            (m, t), slope = known[0], 0.1 * known[0][1]
        else:
            (m0, t0), (m, t) = known[0], known[-1]
            slope = max((t - t0) / (m - m0), 0.0)
        return max(t + slope * (rows - m), 1e-6)


class FlatBelowVerifyCost(LineBelowVerifyCost):
    """Below the fewest rows measured, what the fewest cost; every pass clipped as before."""

    def _on_line(self, rows: int) -> float:
        known = sorted(self.measured.items())
        if known and rows < known[0][0]:
            return known[0][1]
        return super()._on_line(rows)


TABLES = {"L": LineBelowVerifyCost, "F": FlatBelowVerifyCost, "G": VerifyCost}
FRESH = "--fresh" in sys.argv  # every variant's reply is the first of a new engine (a chat's first reply)
VARIANTS = [name for name in sys.argv[1:] if name in TABLES] or ["L", "F"]
runtime = load_runtime(Settings())


engines = {name: engine_with(runtime, TABLES.get(name)) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    if FRESH and name != "target":
        engines[name] = engine_with(runtime, TABLES[name])
    return hybrid_reply(runtime, engines[name], ids, name)


print_paired(interleaved(runtime, VARIANTS, run), [(a, "L") for a in VARIANTS if a != "L"])
