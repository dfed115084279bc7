"""How fast a step streams each model's weights: the layers' one call against the output head, timed
alternately in one loop (2026-12-07; this folder's README, "A draft on fewer bits, offline (not
built)").

One row after 300 tokens of context, 300 rounds (the first 20 left out), each round the layers' one
kernel call and then the head on a random row; the medians, with the bytes each reads (the layers'
packed linears, every stored tensor of them, and the head's) over that time. For the target, a
linear held both ways counts both, though a one-row call reads only its indices.

Run: .venv/bin/python docs/benchmarks/2026-12-07-stream-rates.py [draft|target]   (draft unless given)
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-stream-rates.txt beside this file (both models).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import LAYER_LINEARS
from specdec_tui.models.precision import linear_tensors
from specdec_tui.runtime import load_runtime

ROUNDS, SKIPPED = 300, 20
which = sys.argv[1] if len(sys.argv) > 1 else "draft"
runtime = load_runtime(Settings())
model = lean_forward(getattr(runtime.pair, which).runner)


def stored_bytes(linear: torch.nn.Module) -> int:
    stored = linear_tensors(linear)
    assert stored is not None
    return sum(tensor.numel() * tensor.element_size() for tensor in stored[1].values())


layer_bytes = sum(stored_bytes(getattr(layer, name)) for layer in model.layers for name in LAYER_LINEARS)
head_bytes = stored_bytes(model.head)
model.reset()
model.forward(list(range(1000, 1300)), 1)
length = model.length
x = model.embedding.rows(torch.tensor([5]))
positions = torch.arange(length, length + 1)
cos, sin = model.cos[positions], model.sin[positions]
row = torch.randn(1, x.shape[-1])
layers_s, head_s = [], []
for _ in range(ROUNDS):
    start = time.perf_counter()
    torch.ops.specdec.decoder_layers(x, cos, sin, model.cache.keys, model.cache.values, length, *model.kernel_layers,
                                     None)
    middle = time.perf_counter()
    model.head(row)
    layers_s.append(middle - start)
    head_s.append(time.perf_counter() - middle)
layers, head = statistics.median(layers_s[SKIPPED:]), statistics.median(head_s[SKIPPED:])
print(f"{which}: layers {layer_bytes / 1e6:.0f} MB in {layers * 1e3:.2f} ms ({layer_bytes / layers / 1e9:.1f} GB/s), "
      f"head {head_bytes / 1e6:.0f} MB in {head * 1e3:.2f} ms ({head_bytes / head / 1e9:.1f} GB/s)")
