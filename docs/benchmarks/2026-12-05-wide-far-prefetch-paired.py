"""The paired run for fetching the weights 32 KB ahead into L2 in the wide int8 passes of a few
rows, instead of 16 KB (this folder's README, "The wide passes fetching farther, paired").

On an Intel processor with AVX-512 VNNI every int8 call of a step takes the wide passes, whose one
pass over the weights fetches them far ahead into L2. Run on a build with the patch beside this file
(`2026-12-05-wide-far-prefetch.patch`, against the commit before the change), which makes that
distance a setting: the suite, interleaved per prompt in one process (the order rotating), all 28
prompts, greedy, 128 new tokens, fresh caches, default settings, each variant with an engine of its
own: `target` and `hybrid` fetching 32 KB ahead, `16k-target` and `16k-hybrid` 16 KB ahead as
before. Every reply is asserted equal to target-only's (a fetch changes no number).

Run (with the patch applied): .venv/bin/python docs/benchmarks/2026-12-05-wide-far-prefetch-paired.py
The outputs of 2026-12-05 (the Intel Xeon, 2 cores, two runs) are 2026-12-05-wide-far-prefetch-paired-1.txt and -2.txt
beside this file.
"""

from __future__ import annotations

import sys

import torch
from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

VARIANTS = ["hybrid", "16k-target", "16k-hybrid"]
NEAR, FAR, BEFORE = 2048, 32768, 16384

runtime = load_runtime(Settings())
if quantized_kernels.kernel_setting("use_wide_passes_from") != 1:
    sys.exit("int8 steps do not take the wide passes on this host: nothing to compare")
print(f"{quantized_kernels.instruction_set()} products; wide int8 passes fetch {FAR} or {BEFORE} bytes ahead")
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    torch.ops.specdec.use_prefetch_distances(NEAR, BEFORE if name.startswith("16k") else FAR)
    return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")


print_paired(interleaved(runtime, VARIANTS, run), [("hybrid", "16k-hybrid"), ("16k-hybrid", "16k-target")])
