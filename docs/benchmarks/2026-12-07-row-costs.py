"""Where a verify pass's extra rows go on this host (this folder's README, "What a pass's extra rows
cost on the Zen 4 (measured, not built)").

1. The target's pass after 300 tokens at 1, 2, 3 and 5 rows, split into the layers' one kernel call,
   the final norm and the head, and the whole forward, in turn, 120 rounds (medians of the last 110).
2. Each kind of the target's linears over all layers, one call each, at 1, 2, 3 and 5 rows (calls of
   up to three rows read the indices, longer ones the int8 blocks), 40 rounds.
3. One layer's gate and up projection (17 MB of indexed records, read again and again, so from the
   last-level cache, not memory) at 1 to 6 rows on the indices: nanoseconds per 128-weight record, and
   the same call's time on the blocks, next to the first layer's cold time in part 2.

Run: .venv/bin/python docs/benchmarks/2026-12-07-row-costs.py
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-row-costs.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.models.fast_llama import LAYER_LINEARS
from specdec_tui.runtime import load_runtime

ROWS = (1, 2, 3, 5)
target = lean_forward(load_runtime(Settings()).pair.target.runner)


def median_ms(times: list[float], skipped: int) -> float:
    return statistics.median(times[skipped:]) * 1e3


# 1. A pass's parts
target.reset()
target.forward(list(range(1000, 1300)), 1)
length = target.length
parts: dict[int, list[list[float]]] = {rows: [[], [], [], []] for rows in ROWS}
for _ in range(120):
    for rows in ROWS:
        ids = list(range(5, 5 + rows))
        x = target.embedding.rows(torch.tensor(ids))
        positions = torch.arange(length, length + rows)
        cos, sin = target.cos[positions], target.sin[positions]
        start = time.perf_counter()
        y = torch.ops.specdec.decoder_layers(x, cos, sin, target.cache.keys, target.cache.values, length,
                                             *target.kernel_layers, None)
        layers = time.perf_counter()
        normed = target.final_norm(y)
        norm = time.perf_counter()
        target.head(normed)
        head = time.perf_counter()
        target.length = length
        target.forward(ids, rows)
        whole = time.perf_counter()
        target.length = length
        for times, spent in zip(parts[rows], (layers - start, norm - layers, head - norm, whole - head), strict=True):
            times.append(spent)
print("1. a target pass after 300 tokens, ms (median of 110 rounds)")
for rows, (layers_s, norm_s, head_s, whole_s) in parts.items():
    print(f"  {rows} rows: layers {median_ms(layers_s, 10):.2f}, final norm {median_ms(norm_s, 10):.3f}, "
          f"head {median_ms(head_s, 10):.2f}; the whole forward {median_ms(whole_s, 10):.2f}")

# 2. Each kind of linear over all layers
kinds: dict[tuple[str, str], list[torch.nn.Module]] = {}
for layer in target.layers:
    for name in LAYER_LINEARS:
        linear = getattr(layer, name)
        kinds.setdefault((name, type(linear).__name__), []).append(linear)
linear_times: dict[tuple[tuple[str, str], int], list[float]] = {}
for _ in range(40):
    for rows in ROWS:
        for kind, linears in kinds.items():
            x = torch.randn(rows, linears[0].in_features)
            start = time.perf_counter()
            for linear in linears:
                linear(x)
            linear_times.setdefault((kind, rows), []).append(time.perf_counter() - start)
print("2. each kind of linear over all layers, one call each, ms (median of 35 rounds)")
for kind, linears in kinds.items():
    cells = ", ".join(f"{rows} rows {median_ms(linear_times[(kind, rows)], 5):.2f}" for rows in ROWS)
    print(f"  {kind[0]} ({kind[1]}, {len(linears)}): {cells}")

# 3. One gate and up projection again and again
gate_up = target.layers[3].gate_up
records = gate_up.records.shape[0] * gate_up.records.shape[1]
print(f"3. layer 3's gate and up projection, {records} records of 128 weights, {gate_up.records.numel() / 1e6:.1f} MB "
      "indexed, read again and again (median of 7 runs of 20 calls)")
for rows in (1, 2, 3, 4, 6):
    x = torch.randn(rows, gate_up.in_features)
    cells = []
    for form, up_to in (("indices", 100_000), ("blocks", 0)):
        with quantized_kernels.using_indexed_int8_up_to(up_to):
            gate_up(x)
            runs = []
            for _ in range(7):
                start = time.perf_counter()
                for _ in range(20):
                    gate_up(x)
                runs.append((time.perf_counter() - start) / 20)
        spent = statistics.median(runs)
        cells.append(f"{form} {spent * 1e3:.3f} ms" + (f" ({spent / records * 1e9:.2f} ns a record)"
                                                         if form == "indices" else ""))
    print(f"  {rows} rows: " + ", ".join(cells))
