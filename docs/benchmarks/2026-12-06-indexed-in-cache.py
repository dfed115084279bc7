"""One indexed int8 linear's call timed from cache and streamed from memory, against the same int8
weights as blocks: this folder's README, "The form a call reads, by measured speed".

A linear of 1024 columns by 1536 inputs with random 4-bit indices and tables (`index_tables`), packed
both ways (`pack_indexed_int8`'s records, 0.98 MB; `int8_blocks`, 1.57 MB). In cache: that one linear
called 200 times in a row; streamed: 250 such linears (245 MB of records) called in turn, 8 rounds.
For 1, 2, 3, 4, 6, 8, 10 and 12 rows, the median microseconds of a call reading the records and of a
call reading the blocks (`using_indexed_int8_up_to` 1000 and 0; the outputs are the same).

Run: .venv/bin/python docs/benchmarks/2026-12-06-indexed-in-cache.py
Output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-06-indexed-in-cache.txt
"""

from __future__ import annotations

import statistics
import time

import torch

from specdec_tui.models import quantized_kernels

if "avx512_vnni" not in quantized_kernels.instruction_sets():
    raise SystemExit("the indices are read on AVX-512 VNNI; this processor runs " + quantized_kernels.instruction_set())
OUTPUTS, INPUTS = 1024, 1536
Linear = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def linear(seed: int) -> Linear:
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randint(0, 16, (OUTPUTS, INPUTS), generator=generator)
    steps = torch.rand(OUTPUTS, INPUTS // 32, generator=generator) * 0.01 + 0.001
    offsets = torch.rand(OUTPUTS, INPUTS // 32, generator=generator) * 0.05
    a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
    blocks, int8_scales, sums = quantized_kernels.int8_blocks(quantized_kernels.expand_tables(indices, a, b), scales)
    return quantized_kernels.pack_indexed_int8(indices, a, b), blocks, int8_scales, sums


def call_microseconds(linears: list[Linear], rows: int, rounds: int) -> dict[str, float]:
    x = torch.randn(rows, INPUTS)
    times = {}
    for form, up_to in (("indices", 1000), ("blocks", 0)):
        with quantized_kernels.using_indexed_int8_up_to(up_to):
            seconds = []
            for _ in range(rounds):
                start = time.perf_counter()
                for records, blocks, scales, sums in linears:
                    torch.ops.specdec.indexed_int8_linear(x, blocks, scales, sums, records, None, OUTPUTS)
                seconds.append((time.perf_counter() - start) / len(linears))
        times[form] = statistics.median(seconds[1:]) * 1e6
    return times


cached = [linear(0)]
streamed = [linear(seed) for seed in range(250)]
for rows in (1, 2, 3, 4, 6, 8, 10, 12):
    near, far = call_microseconds(cached, rows, 200), call_microseconds(streamed, rows, 8)
    print(f"{rows:2d} rows: in cache, indices {near['indices']:.0f} us, blocks {near['blocks']:.0f} us; "
          f"streamed, indices {far['indices']:.0f} us, blocks {far['blocks']:.0f} us", flush=True)
