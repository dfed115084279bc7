"""The indexed int8 pass on 256-bit registers (the one hosts without AVX-512 VNNI would run), whole
target passes: this folder's README, "The form a call reads, by measured speed".

On the loaded pair after 300 tokens, with the products on the instruction set SET (`avx2`, say), the
target's whole pass at 1 to 6 rows with every call of its indexed linears reading the indices and with
every call reading the int8 blocks, in turn per row count, the order rotating from round to round
(medians of 12 rounds less the first two).

Not on main: the 256-bit pass is in 2026-12-06-indexed-by-speed.patch beside this file; apply it
first (`git apply docs/benchmarks/2026-12-06-indexed-by-speed.patch`), then
Run: .venv/bin/python docs/benchmarks/2026-12-06-indexed-256-bit-passes.py SET
Output of 2026-12-06 (Zen 4 EPYC, 2 cores, its AVX2 products): 2026-12-06-indexed-256-bit-passes.txt
"""

from __future__ import annotations

import sys

import torch
from paired_levers import lean_forward, pass_times, print_pass_times

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
target = lean_forward(runtime.pair.target.runner)
with quantized_kernels.using_instruction_set(sys.argv[1]):
    variants = {"indices": lambda: torch.ops.specdec.use_indexed_int8_up_to(1000),
                "blocks": lambda: torch.ops.specdec.use_indexed_int8_up_to(0)}
    times = pass_times(target, 300, [1, 2, 3, 4, 5, 6], variants, 12)
    print_pass_times(times, 300, "blocks")
