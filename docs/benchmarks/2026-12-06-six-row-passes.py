"""Narrow int8 calls of fewer than six rows run as six-row passes (the extra rows repeat the first
and their sums are dropped, so every output keeps its bits): this folder's README, "Passes of six
rows at least, paired (not kept)". Needs the trial's switch, `quantized_kernels.using_fewest_int8_rows`:
`git apply docs/benchmarks/2026-12-06-six-row-passes.patch` (the trial build, with its test).

`passes`: on the loaded pair after 300 tokens, whole target passes of 1, 3, 4 and 5 rows as they
are and run as six-row passes, the variants in turn per row count, their order rotating from round
to round (medians of 16 rounds less the first two). `suite`: all 28 prompts interleaved per prompt,
the order rotating, greedy, 128 new tokens, fresh caches, default settings, each variant with an
engine of its own: `target` and `hybrid` with every call's own rows, `six-target` and `six-hybrid`
with six rows at least; every reply asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-06-six-row-passes.py passes|suite
Outputs of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI) beside this file:
2026-12-06-six-row-passes-passes.txt and -1.txt to -3.txt on a first form of the switch (the same
int8 passes; it also ran a draft's lone int4 row as a pass of more rows), -4.txt and -5.txt on the
patch's.
"""

from __future__ import annotations

import sys

import torch
from paired_levers import (
    Reply,
    engine_with,
    hybrid_reply,
    interleaved,
    lean_forward,
    pass_times,
    print_paired,
    print_pass_times,
)

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
if sys.argv[1] == "passes":
    target = lean_forward(runtime.pair.target.runner)
    times = pass_times(target, 300, [1, 3, 4, 5],
                       {"as is": lambda: torch.ops.specdec.use_fewest_int8_rows(1),
                        "six rows at least": lambda: torch.ops.specdec.use_fewest_int8_rows(6)}, 16)
    torch.ops.specdec.use_fewest_int8_rows(-1)
    print_pass_times(times, 300, "as is")
else:
    VARIANTS = ["hybrid", "six-target", "six-hybrid"]
    engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}

    def run(ids: list[int], name: str) -> Reply:
        with quantized_kernels.using_fewest_int8_rows(6 if name.startswith("six") else 1):
            return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")

    print_paired(interleaved(runtime, VARIANTS, run), [("six-hybrid", "hybrid")])
