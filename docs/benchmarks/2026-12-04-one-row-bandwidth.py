"""How close the one-row int8 product comes to reading its weights at the host's streaming rate.

A target step at one row is the int8 product reading about 1.5 GB of packed weights, so its
bandwidth sets a step's cost. This times ``int8_linear`` at one row over 24 packed 8960 x 1536
matrices (330 MB, ten times the L3) against ``torch.sum`` over as many bytes of floats, at one thread and at
two, the two interleaved round by round so that the machine's drift falls on both alike.

Run: .venv/bin/python docs/benchmarks/2026-12-04-one-row-bandwidth.py
The output of 2026-12-04 (AMD EPYC Zen 3, 2 cores, AVX2) is 2026-12-04-one-row-bandwidth.txt beside this file.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from specdec_tui.models import quantized_kernels

ROUNDS = 12
OUT_FEATURES, IN_FEATURES, MATRICES = 8960, 1536, 24


def seconds(work: Callable[[], None]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    if not quantized_kernels.available():
        sys.exit("the package's kernels do not build here: nothing to time")
    torch.manual_seed(0)
    packed = [quantized_kernels.pack_int8(torch.randn(OUT_FEATURES, IN_FEATURES)) for _ in range(MATRICES)]
    # Floats of their own, not the weights' bytes read as floats, which would hold denormals.
    as_floats = [torch.randn(weights.numel() // 4) for weights, _, _ in packed]
    gigabytes = sum(weights.numel() for weights, _, _ in packed) / 1e9
    row = torch.randn(1, IN_FEATURES)

    def products() -> None:
        for weights, scales, column_sums in packed:
            torch.ops.specdec.int8_linear(row, weights, scales, column_sums, None, OUT_FEATURES)

    def sums() -> None:
        for floats in as_floats:
            floats.sum()

    print(f"{quantized_kernels.instruction_set()}; {MATRICES} matrices {OUT_FEATURES} x {IN_FEATURES}, {gigabytes:.2f} GB")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times: dict[str, list[float]] = {"int8_linear, one row": [], "torch.sum": []}
        for _ in range(ROUNDS):
            times["int8_linear, one row"].append(seconds(products))
            times["torch.sum"].append(seconds(sums))
        for name, measured in times.items():
            measured.sort()
            print(f"{threads} thread(s)  {name:21s} median {gigabytes / measured[ROUNDS // 2]:5.1f} GB/s"
                  f"  best {gigabytes / measured[0]:5.1f} GB/s")


if __name__ == "__main__":
    main()
