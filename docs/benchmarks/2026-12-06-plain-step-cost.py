"""The paired run for pricing a drafted step's rows apart from a plain step's one-row pass (this
folder's README, "A plain step's pass priced apart, paired (not kept)").

The products may run a one-row pass apart from passes of more rows: on AVX2, and on a trial build
on AMD processors with AVX-512 VNNI too (not kept), an int8 pass of one or two rows leaves its
fetching to the hardware. (On the package's own build, `target` and `fetching-target` are the same
on a host with AVX-512 VNNI, and so are the `hybrid` variants with and without `fetching-`.) The
verify-cost table drew its line for unmeasured row counts, and each extra row's slope, through the
one-row cost, so a cheaper plain step made a drafted step's rows look dearer. Here, interleaved per prompt in one process (the order rotating), all 28 prompts of the
suite, greedy, 128 new tokens, fresh caches, default settings, each variant with an engine of its
own:
- `target`: target-only, the int8 short passes fetching less (the trial build's choice);
- `fetching-target`: target-only, every pass fetching ahead (main's choice on this instruction set);
- `hybrid`: the short passes fetching less, the verify-cost table pricing the rows apart;
- `old-hybrid`: the short passes fetching less, the package's table (its line through the one-row cost);
- `fetching-hybrid`: every pass fetching ahead, the rows priced apart;
- `fetching-old-hybrid`: every pass fetching ahead, the package's table (main's before this trial).
Every reply is asserted equal to target-only's. The per-prompt lines give `fetching-target` over
`target` too.

The output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI) is 2026-12-06-plain-step-cost.txt
beside this file: no variant of the table moved `hybrid` beyond the run's noise, so the package's
table stayed as it was.

Run: .venv/bin/python docs/benchmarks/2026-12-06-plain-step-cost.py
"""

from __future__ import annotations

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime


class RowsPricedApart(VerifyCost):
    """The trial's table (not kept): a pass of two rows or more priced from passes of two rows or
    more wherever there are any, and the slope of a drafted step's next row never reaching down to
    the one-row cost."""

    def extra_row(self, rows: int) -> float:
        low, high = (1 if rows == 1 else max(rows - 1, 2)), rows + 2
        return max((self(high) - self(low)) / (high - low), 0.0)

    def _on_line(self, rows: int) -> float:
        known = sorted((m, t) for m, t in self.measured.items() if rows == 1 or m > 1)
        if not known:
            return super()._on_line(rows)
        saved, self.measured = self.measured, dict(known)
        try:
            return super()._on_line(rows)
        finally:
            self.measured = saved


runtime = load_runtime(Settings())
print(f"{quantized_kernels.instruction_set()} products")
VARIANTS = ["fetching-target", "hybrid", "old-hybrid", "fetching-hybrid", "fetching-old-hybrid"]
engines = {name: engine_with(runtime, VerifyCost if "old" in name else RowsPricedApart)
           for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    with quantized_kernels.using_short_pass_prefetch(True if name.startswith("fetching") else None):
        return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")


print_paired(interleaved(runtime, VARIANTS, run),
             [("hybrid", "fetching-old-hybrid"), ("hybrid", "old-hybrid"), ("fetching-hybrid", "fetching-old-hybrid"),
              ("old-hybrid", "fetching-old-hybrid")])
