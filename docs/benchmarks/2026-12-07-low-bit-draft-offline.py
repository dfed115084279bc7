"""How often the draft still proposes the target's token with some of its int4 weights on a 3-bit or
2-bit grid (2026-12-07; this folder's README, "A draft on fewer bits, offline (not built)"). Measured
offline, nothing of it is in the engine.

A draft token costs its weights' bytes; on the Zen 4 it is about a quarter of a one-row target pass,
and prose's steps spend a quarter to two fifths of their time drafting. Fewer bits a weight would
cut that, if the draft kept proposing what the target writes. Here: the target's own greedy replies
(96 tokens) to the 28 suite prompts, then the draft teacher-forced over each prompt and reply; at
every reply position, whether the draft's greedy token is the target's (the per-token agreement
that bounds acceptance).

The low-bit weights are simulated in the int4 format itself, so no kernel changes: each 4-bit value q
(0..15, a group's scale and minimum unchanged) moves to the nearest even value up to 14, eight
levels two steps apart (a 3-bit grid; the group's top value loses one step more than a 3-bit grid
fitted to the group would), or to 0, 5, 10 or 15 (a 2-bit grid over the group's whole range).

Run: .venv/bin/python docs/benchmarks/2026-12-07-low-bit-draft-offline.py
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-low-bit-draft-offline.txt beside this file.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

import torch
from paired_levers import greedy_reply, lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.precision import PackedInt4Linear
from specdec_tui.runtime import load_runtime

REPLY_TOKENS = 96
#: Each 4-bit value's stand-in: the nearest even value (ties to a multiple of four), at most 14.
THREE_BIT = torch.tensor([min((q + ((q >> 1) & 1)) & ~1, 14) for q in range(16)], dtype=torch.uint8)
TWO_BIT = torch.tensor([5 * round(q / 5) for q in range(16)], dtype=torch.uint8)

runtime = load_runtime(Settings())
draft, target = lean_forward(runtime.pair.draft.runner), lean_forward(runtime.pair.target.runner)
prompts = [(item.category, runtime.prompt_ids(item.messages)) for item in load_suite(default_suite_path())]
replies = [greedy_reply(target, ids, REPLY_TOKENS) for _, ids in prompts]


def agreement() -> dict[str, float]:
    """Per category, the mean share of reply positions where the draft proposes the reply's token."""
    shares: dict[str, list[float]] = defaultdict(list)
    for (category, ids), reply in zip(prompts, replies, strict=True):
        draft.reset()
        proposed = draft.forward(ids + reply[:-1], len(reply)).argmax(-1)
        shares[category].append((proposed == torch.tensor(reply)).float().mean().item())
    return {category: round(statistics.mean(values), 4) for category, values in shares.items()}


def layer_linears(names: Iterable[str]) -> list[PackedInt4Linear]:
    return [getattr(layer, name) for layer in draft.layers for name in names]


VARIANTS = {
    "down projections on the 3-bit grid": (lambda: layer_linears(["down"]), THREE_BIT),
    "MLP (gate, up, down) on the 3-bit grid": (lambda: layer_linears(["gate_up", "down"]), THREE_BIT),
    "every layer linear on the 3-bit grid": (lambda: layer_linears(["qkv", "out_proj", "gate_up", "down"]), THREE_BIT),
    "output head on the 3-bit grid": (lambda: [draft.head], THREE_BIT),
    "output head on the 2-bit grid": (lambda: [draft.head], TWO_BIT),
}

print("int4 as loaded:", agreement(), flush=True)
for name, (linears, grid) in VARIANTS.items():
    chosen = linears()
    assert all(isinstance(linear, PackedInt4Linear) for linear in chosen)
    originals = [linear.packed.clone() for linear in chosen]
    for linear in chosen:  # in place: the one-call layers' arguments hold the same tensors
        nibbles = linear.packed
        nibbles.copy_(grid[(nibbles & 15).long()] | (grid[(nibbles >> 4).long()] << 4))
    print(f"{name}:", agreement(), flush=True)
    for linear, original in zip(chosen, originals, strict=True):
        linear.packed.copy_(original)
print("int4 again:", agreement(), flush=True)
