"""The package's attention kernel alone, by context length and rows: what a verify pass's attention
costs as a chat grows (this folder's README, "Verify costs from a shorter context").

``attend_rows`` for the target's shape (12 query heads sharing 2 key/value heads of 128), float32
caches of random numbers, 1 / 5 / 9 rows after 1,024 / 4,096 / 8,192 positions: milliseconds a layer
(the median of the calls in one second), the multiply-adds a second (each row's scores and weighted
values: 2 x rows x heads x positions x 128), and the 28 layers' total.

Run: .venv/bin/python docs/benchmarks/2026-12-07-attention-by-context.py
"""

from __future__ import annotations

import time
from statistics import median

import torch

from specdec_tui.models import quantized_kernels

HEADS, KV_HEADS, HEAD_DIM, LAYERS = 12, 2, 128, 28
assert quantized_kernels.available(), "the package's kernels did not build"
print(f"products: {quantized_kernels.instruction_set()}; {torch.get_num_threads()} threads")
for context in (1024, 4096, 8192):
    keys, values = torch.randn(KV_HEADS, context + 32, HEAD_DIM), torch.randn(KV_HEADS, context + 32, HEAD_DIM)
    for rows in (1, 5, 9):
        q = torch.randn(rows, HEADS, HEAD_DIM) * 0.1
        times = []
        start = time.perf_counter()
        while time.perf_counter() - start < 1.0:
            began = time.perf_counter()
            torch.ops.specdec.attend_rows(q, keys, values, context)
            times.append(time.perf_counter() - began)
        ms = 1000 * median(times)
        multiply_adds = 2 * rows * HEADS * (context + rows) * HEAD_DIM
        print(f"after {context} positions, {rows} rows: {ms:.3f} ms a layer, {multiply_adds / ms / 1e6:.1f} G "
              f"multiply-adds a second, {LAYERS * ms:.1f} ms the {LAYERS} layers", flush=True)
