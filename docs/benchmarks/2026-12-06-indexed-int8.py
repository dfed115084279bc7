"""The target's Q4_K tensors as int8 weights held in 4-bit indices into tables, against the int8
blocks of the same weights: this folder's README, "The target's Q4_K weights as indexed int8,
paired" (its first part).

Reads every Q4_K tensor of the default target's GGUF but the embedding (the layers' q, k, o, gate
and up projections and the Q4_K half of the down projections), makes each column's int8 tables
(`quantized_kernels.index_tables`) and packs the expanded int8 weights both ways: `int8_linear`'s
blocks and `indexed_int8_linear`'s records (that op reads the blocks with
`using_indexed_int8_up_to(0)`, the records with it at 1000). Then, for 1, 2, 3, 4, 6 and 9 rows, all those tensors'
products one after another as a step's pass runs them, each kind in turn, the order alternating
from round to round (medians of 11 rounds less the first); every output is checked equal between the
two kinds. Also how many of the tables' int8 weights differ from `pack_int8`'s rounding.

Run: .venv/bin/python docs/benchmarks/2026-12-06-indexed-int8.py
Output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-06-indexed-int8.txt
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
from gguf import GGUFReader

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.q4k import q4k_parts, q4k_weight

if "avx512_vnni" not in quantized_kernels.instruction_sets():
    raise SystemExit("indexed_int8_linear runs on AVX-512 VNNI; this processor runs " + quantized_kernels.instruction_set())
settings = Settings()
path = ModelCache(settings.models.cache_dir).path(settings.models.target) / "model.gguf"
reader = GGUFReader(path)
int8_weights, indexed_weights, int8_bytes, indexed_bytes, differing, total = [], [], 0, 0, 0, 0
for tensor in reader.tensors:
    if tensor.tensor_type.name != "Q4_K" or tensor.name == "token_embd.weight":
        continue
    width, rows = (int(n) for n in tensor.shape)
    indices, steps, offsets = q4k_parts(np.asarray(tensor.data), rows, width)
    a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
    expanded = quantized_kernels.expand_tables(indices, a, b)
    weight = q4k_weight((indices, steps, offsets))
    differing += int((expanded.float() != torch.round(weight / scales[:, None]).clamp(-127, 127)).sum())
    total += expanded.numel()
    int8_weights.append((quantized_kernels.int8_blocks(expanded, scales), rows, width))
    indexed_weights.append(quantized_kernels.pack_indexed_int8(indices, a, b))
    int8_bytes += int8_weights[-1][0][0].numel()
    indexed_bytes += indexed_weights[-1].numel()
print(f"{len(int8_weights)} Q4_K tensors, {total / 1e6:.0f}M weights: int8 blocks {int8_bytes / 1e6:.0f} MB, "
      f"indexed records {indexed_bytes / 1e6:.0f} MB ({indexed_bytes / int8_bytes:.3f}); "
      f"{differing / total:.4f} of the tables' weights differ from pack_int8's rounding (by one)", flush=True)

kinds = {"int8": 0, "indexed": 1000}  # the rows up to which calls read the indices


def pass_seconds(kind: str, rows: int, inputs: dict[int, torch.Tensor]) -> tuple[float, list[torch.Tensor]]:
    outputs = []
    with quantized_kernels.using_indexed_int8_up_to(kinds[kind]):
        start = time.perf_counter()
        for ((packed, scales, sums), out_features, width), records in zip(int8_weights, indexed_weights, strict=True):
            outputs.append(torch.ops.specdec.indexed_int8_linear(inputs[width], packed, scales, sums, records, None,
                                                                 out_features))
        return time.perf_counter() - start, outputs


for rows in (1, 2, 3, 4, 6, 9):
    inputs = {width: torch.randn(rows, width) for width in {w for _, _, w in int8_weights}}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for round_ in range(12):
        order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
        outputs = {}
        for kind in order:
            seconds, outputs[kind] = pass_seconds(kind, rows, inputs)
            times[kind].append(seconds)
        assert all(torch.equal(x, y) for x, y in zip(outputs["int8"], outputs["indexed"], strict=True))
    int8_ms, indexed_ms = (statistics.median(times[kind][1:]) * 1000 for kind in kinds)
    print(f"{rows} rows: int8 {int8_ms:.1f} ms, indexed {indexed_ms:.1f} ms, indexed / int8 {indexed_ms / int8_ms:.3f}",
          flush=True)
