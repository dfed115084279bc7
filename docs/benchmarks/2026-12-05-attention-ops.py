"""A verify pass's work besides the products, op by op (this folder's README, "Attention scores two
queries at a time, paired").

The kernels a target layer runs between its products, with the default target's shapes (12 query
heads over 2 key/value heads of 128, 1536 wide, SwiGLU 8960), over 28 layers' caches, for 1 / 3 / 5 /
9 rows after CONTEXT tokens: both RMS norms, the rotary and cache write, the attention, SwiGLU and
the two residual adds; 12 rounds, the first two left out.

Run: .venv/bin/python docs/benchmarks/2026-12-05-attention-ops.py [CONTEXT, e.g. 300]
The outputs of 2026-12-05 (the Intel Xeon, 2 cores) are in 2026-12-05-attention-ops.txt beside this file.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from specdec_tui.models import quantized_kernels

LAYERS, CAPACITY, ROUNDS, ROWS = 28, 1100, 12, [1, 3, 5, 9]
OPS = ["norms", "rotary", "attention", "swiglu", "adds"]


@torch.inference_mode()
def main() -> None:
    context = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    if not quantized_kernels.available():
        raise SystemExit("the package's kernels are not loaded here")
    ops = torch.ops.specdec
    keys = [torch.randn(2, CAPACITY, 128) for _ in range(LAYERS)]
    values = [torch.randn(2, CAPACITY, 128) for _ in range(LAYERS)]
    norm = torch.rand(1536) + 0.5
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(ROUNDS):
        for m in ROWS:
            x, qkv, gate_up = torch.randn(m, 1536), torch.randn(m, 2048), torch.randn(m, 17920)
            cos, sin = torch.randn(m, 128), torch.randn(m, 128)
            q = ops.rotate_into_cache(qkv, cos, sin, keys[0], values[0], context, 12, 0.088)
            for name in OPS:
                start = time.perf_counter()
                for i in range(LAYERS):
                    if name == "norms":
                        ops.rms_norm(x, norm, 1e-6), ops.rms_norm(x, norm, 1e-6)
                    elif name == "rotary":
                        ops.rotate_into_cache(qkv, cos, sin, keys[i], values[i], context, 12, 0.088)
                    elif name == "attention":
                        ops.attend_rows(q, keys[i], values[i], context)
                    elif name == "swiglu":
                        ops.silu_mul(gate_up)
                    else:
                        x + x, x + x
                times.setdefault((m, name), []).append(time.perf_counter() - start)
    for m in ROWS:
        parts = [f"{name} {statistics.median(times[m, name][2:]) * 1000:.2f}" for name in OPS]
        print(f"after {context} tokens, {m} rows, ms over {LAYERS} layers: " + ", ".join(parts), flush=True)


if __name__ == "__main__":
    main()
