"""What a dropped int8 block costs, by kind of linear: each kind's Q4_K linears over all layers, read
from their indices and from their blocks, alternately, at four to sixteen rows (this folder's README,
"A memory budget (the default)").

Fifteen rounds; the medians' ratio and difference, and the difference per 100 MB of blocks the kind
holds: what letting that much go adds to a pass of that many rows.

Run: .venv/bin/python docs/benchmarks/2026-12-07-dropped-block-cost.py
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-dropped-block-cost.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.models.fast_llama import LAYER_LINEARS
from specdec_tui.models.precision import IndexedInt8Linear
from specdec_tui.runtime import load_runtime

ROUNDS, SKIPPED, ROWS = 15, 2, (4, 6, 9, 16)
target = lean_forward(load_runtime(Settings()).pair.target.runner)
kinds: dict[str, list[IndexedInt8Linear]] = {}
for layer in target.layers:
    for name in LAYER_LINEARS:
        if isinstance(linear := getattr(layer, name), IndexedInt8Linear):
            kinds.setdefault(name, []).append(linear)
times: dict[tuple[str, str, int], list[float]] = {}
for _ in range(ROUNDS):
    for rows in ROWS:
        for name, linears in kinds.items():
            x = torch.randn(rows, linears[0].in_features)
            for form, up_to in (("indices", 100_000), ("blocks", 0)):
                with quantized_kernels.using_indexed_int8_up_to(up_to):
                    start = time.perf_counter()
                    for linear in linears:
                        linear(x)
                    times.setdefault((name, form, rows), []).append(time.perf_counter() - start)
for name, linears in kinds.items():
    megabytes = sum(linear.packed.numel() for linear in linears) / 1e6
    cells = []
    for rows in ROWS:
        indices, blocks = (statistics.median(times[(name, form, rows)][SKIPPED:]) for form in ("indices", "blocks"))
        cells.append(f"{rows} rows {indices / blocks:.2f}x ({(indices - blocks) * 1e3:+.2f} ms, "
                     f"{(indices - blocks) * 1e5 / megabytes:+.2f} ms / 100 MB)")
    print(f"{name}: {len(linears)} linears, {megabytes:.0f} MB of blocks; indices / blocks: " + "; ".join(cells))
