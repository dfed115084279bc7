"""The paired run for int8 calls of a few rows on the wide passes on Intel processors (this folder's
README, "Short passes on 512-bit registers, paired").

On an Intel processor with AVX-512 VNNI every int8 call now takes the 512-bit passes (a call of one
pass fetching its weights far ahead); elsewhere, and before, only calls of 32 rows or more. The suite,
interleaved per prompt in one process (the order rotating), all 28 prompts, greedy, 128 new tokens,
fresh caches, default settings, each variant with an engine of its own: `target` and `hybrid` as
the processor chooses, `narrow-target` and `narrow-hybrid` with the wide passes from 32 rows as
before. Every reply is asserted equal to target-only's (the same integer sums either way).

Run: .venv/bin/python docs/benchmarks/2026-12-05-wide-short-passes-paired.py
The outputs of 2026-12-05 (the Intel Xeon, 2 cores, two runs) are 2026-12-05-wide-short-passes-paired-1.txt and -2.txt
beside this file.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

VARIANTS = ["hybrid", "narrow-target", "narrow-hybrid"]
BEFORE = 32  # the fewest rows taking the wide passes before, and still on other processors

runtime = load_runtime(Settings())
if "avx512_vnni" not in quantized_kernels.instruction_sets():
    sys.exit("this host has no AVX-512 VNNI: no wide passes to compare")
chosen = quantized_kernels.kernel_setting("use_wide_passes_from")
print(f"{quantized_kernels.instruction_set()} products; int8 calls take the wide passes from {chosen} rows here")
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    with quantized_kernels.using_wide_passes_from(BEFORE if name.startswith("narrow") else chosen):
        return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")


print_paired(interleaved(runtime, VARIANTS, run), [("hybrid", "narrow-hybrid"), ("narrow-hybrid", "narrow-target")])
