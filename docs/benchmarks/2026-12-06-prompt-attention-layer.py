"""One layer's attention over a long block, torch's masked kernel against the package's row kernel
(this folder's README, "A prompt's attention, row by row").

Random queries, keys and values of the default target's heads (12 query heads, 2 key/value heads,
128 wide), a block of each length read from an empty cache, 7 calls each way in turn, medians.

Run: .venv/bin/python docs/benchmarks/2026-12-06-prompt-attention-layer.py
The output of 2026-12-06 (the Intel Xeon with AVX-512 VNNI, 2 cores) is
2026-12-06-prompt-attention-layer.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch

from specdec_tui.models import quantized_kernels
from specdec_tui.models.layers import KernelAttention

HEADS, KV_HEADS, HEAD_DIM = 12, 2, 128


def main() -> None:
    assert quantized_kernels.available(), "the package's kernels do not build here"
    torch.manual_seed(0)
    attention = KernelAttention(HEADS, KV_HEADS, HEAD_DIM)
    for rows in (65, 130, 260, 520, 1040):
        keys, values = torch.randn(KV_HEADS, rows + 64, HEAD_DIM), torch.randn(KV_HEADS, rows + 64, HEAD_DIM)
        q = (torch.randn(rows, HEADS, HEAD_DIM) * attention.scale).contiguous()
        masked, by_row = [], []
        for _ in range(7):
            start = time.perf_counter()
            reference = attention.attend_block(q, keys, values, 0)
            middle = time.perf_counter()
            out = torch.ops.specdec.attend_rows(q, keys, values, 0)
            masked.append(middle - start)
            by_row.append(time.perf_counter() - middle)
        print(f"{rows} rows: masked kernel {statistics.median(masked) * 1000:.2f} ms, row kernel "
              f"{statistics.median(by_row) * 1000:.2f} ms, largest difference {(reference - out).abs().max().item():.1e}")


if __name__ == "__main__":
    main()
