"""Int8 passes on the wide and the 256-bit passes, row count by row count, on the Xeon (this
folder's README, "Short passes on 512-bit registers on the Xeon, paired": where prose's loss may
come from).

On an Intel processor every int8 call takes the wide passes (``use_wide_passes_from`` is 1 there);
this times a target pass and a draft pass of M = 1..9 rows after CONTEXT tokens both ways, the
threshold set to 1 and to 32 in turn, 25 rounds, the order alternating, the first two rounds left
out. The numbers are the same integers either way. The draft's layers and head are int4, whose
wide passes start at 6 rows either way, so its passes are a control.

Run: .venv/bin/python docs/benchmarks/2026-12-05-wide-passes-by-rows.py [CONTEXT, e.g. 160]
The outputs of 2026-12-05 (the Intel Xeon, 2 cores) are in 2026-12-05-wide-passes-by-rows.txt beside this file.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

ROUNDS = 25
ROWS = [1, 2, 3, 4, 5, 6, 7, 8, 9]
WAYS = {"wide": 1, "256-bit": 32}


@torch.inference_mode()
def main() -> None:
    context = int(sys.argv[1]) if len(sys.argv) > 1 else 160
    runtime = load_runtime(Settings())
    if "avx512_vnni" not in quantized_kernels.instruction_sets():
        sys.exit("this host has no AVX-512 VNNI: no wide passes to compare")
    chosen = quantized_kernels.kernel_setting("use_wide_passes_from")
    print(f"{quantized_kernels.instruction_set()} products; int8 calls take the wide passes from {chosen} rows here")
    for model in ["target", "draft"]:
        runner = lean_forward(getattr(runtime.pair, model).runner)
        runner.reset()
        runner.forward(list(range(1000, 1000 + context)), 1)
        times: dict[tuple[int, str], list[float]] = {(m, way): [] for m in ROWS for way in WAYS}
        for round_ in range(ROUNDS):
            for m in ROWS:
                for way in list(WAYS)[round_ % 2 :] + list(WAYS)[: round_ % 2]:
                    with quantized_kernels.using_wide_passes_from(WAYS[way]):
                        start = time.perf_counter()
                        runner.forward(list(range(2000, 2000 + m)), m)
                        times[m, way].append(time.perf_counter() - start)
                    runner.crop(context)
        for m in ROWS:
            wide, narrow = (statistics.median(times[m, way][2:]) for way in WAYS)
            print(f"{model} after {context} tokens, {m} rows: wide {wide * 1000:.2f} ms, 256-bit {narrow * 1000:.2f} ms, "
                  f"wide / 256-bit {wide / narrow:.3f}", flush=True)


if __name__ == "__main__":
    main()
