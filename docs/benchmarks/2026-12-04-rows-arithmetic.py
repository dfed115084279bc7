"""Whether a verify pass's extra rows cost memory or arithmetic, on the host's int8 products.

``int8_linear`` over eight layers' worth of the default target's matrices (0.37 GB, past the L3),
at M rows: the one-row time is the weights' stream, and M rows' multiply-adds at the rate a long
prompt's call reaches (124 rows, where the stream is shared by so many rows that only arithmetic is
left) is the arithmetic. A pass costs at least the larger of the two; how near it comes to that says
how well the two overlap. Row counts are timed in turn, round after round, medians reported.
Then the same prompt-sized call on the int4 products (a draft's) and on torch's float matmul over
the unquantized weights: what a prompt pass could gain from either.

Run: .venv/bin/python docs/benchmarks/2026-12-04-rows-arithmetic.py
The output of 2026-12-04 (AMD EPYC Zen 3, 2 cores, AVX2) is 2026-12-04-rows-arithmetic.txt beside this file.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from statistics import median

import torch

from specdec_tui.models import quantized_kernels

ROUNDS = 9
ROWS = (1, 2, 4, 5, 6, 7, 9, 12, 16, 124)
PROMPT_ROWS = ROWS[-1]
# One layer of qwen2.5-coder-1.5b as the package packs it: q/k/v, o, gate/up, down.
LAYER = ((2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960))
LAYERS = 8


def elapsed(call: Callable[[], None]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    if not quantized_kernels.available():
        sys.exit("the package's kernels do not build here: nothing to time")
    torch.manual_seed(0)
    weights = [torch.randn(out, width) * 0.05 for out, width in LAYER * LAYERS]
    matrices = [(w.shape[0], quantized_kernels.pack_int8(w)) for w in weights]
    multiply_adds = sum(out * width for out, width in LAYER * LAYERS)
    inputs = {m: {width: torch.randn(m, width) for _, width in LAYER} for m in ROWS}

    def int8_call(m: int) -> None:
        for out, (weights, scales, column_sums) in matrices:
            torch.ops.specdec.int8_linear(inputs[m][weights.shape[1] * 4], weights, scales, column_sums, None, out)

    times: dict[int, list[float]] = {m: [] for m in ROWS}
    for m in ROWS:  # warm
        int8_call(m)
    for _ in range(ROUNDS):
        for m in ROWS:
            times[m].append(elapsed(functools.partial(int8_call, m)))
    seconds = {m: median(measured) for m, measured in times.items()}
    prompt_rate = PROMPT_ROWS * multiply_adds / seconds[PROMPT_ROWS]
    print(f"{quantized_kernels.instruction_set()} products, {torch.get_num_threads()} threads; "
          f"{multiply_adds / 1e9:.2f} GB of int8 weights; a {PROMPT_ROWS}-row call: {prompt_rate / 1e9:.0f} GMAC/s\n")
    print("| rows M | ms | v(M) | GMAC/s | stream alone, ms | arithmetic alone, ms | ms / larger |")
    print("|---|---|---|---|---|---|---|")
    for m in ROWS[:-1]:
        arithmetic = m * multiply_adds / prompt_rate
        print(f"| {m} | {1000 * seconds[m]:.1f} | {seconds[m] / seconds[1]:.2f} | {m * multiply_adds / seconds[m] / 1e9:.0f} "
              f"| {1000 * seconds[1]:.1f} | {1000 * arithmetic:.1f} | {seconds[m] / max(seconds[1], arithmetic):.2f} |")

    int4 = [(w.shape, quantized_kernels.pack_int4(w)) for w in weights]
    prompt = inputs[PROMPT_ROWS]

    def int4_call() -> None:
        for (out, width), (packed, scales, minimums) in int4:
            torch.ops.specdec.int4_linear(prompt[width], packed, scales, minimums, None, out)

    def float_call() -> None:
        for w in weights:
            prompt[w.shape[1]] @ w.T

    others = {"int4_linear": int4_call, "float matmul": float_call}
    spent: dict[str, list[float]] = {name: [] for name in others}
    for _ in range(ROUNDS):
        for name, call in others.items():
            spent[name].append(elapsed(call))
    print(f"\na {PROMPT_ROWS}-row call: int8_linear {prompt_rate / 1e9:.0f} GMAC/s, " + ", ".join(
        f"{name} {PROMPT_ROWS * multiply_adds / median(measured) / 1e9:.0f}" for name, measured in spent.items()))


if __name__ == "__main__":
    main()
