"""How often the draft still proposes the target's token with one of its layers left out (2026-12-03;
this folder's README, "A pass's own overhead, paired"). Measured offline, nothing of it is in the engine.

A draft token is its weights' bytes, 1/24 of its layers' in each layer; a draft that skipped a layer
would be that much cheaper if it kept proposing what the target writes. Here: the target's own greedy
replies (96 tokens) to the 28 suite prompts, then the draft over each prompt and reply in blocks of
up to 64 rows (its kernels' one call), all layers or all but one; at every reply position, whether
the draft's greedy token given the target's prefix is the target's token (the per-token agreement
that bounds acceptance).

Run: .venv/bin/python docs/benchmarks/2026-12-03-skipped-layers.py
Output of that day: 2026-12-03-skipped-layers.txt beside this file.
"""

from __future__ import annotations

import statistics

import torch
from paired_levers import greedy_reply, lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import MAX_ROWS, kernel_layer_args
from specdec_tui.runtime import load_runtime

REPLY_TOKENS = 96
runtime = load_runtime(Settings())


draft, target = lean_forward(runtime.pair.draft.runner), lean_forward(runtime.pair.target.runner)


def agreement(keep: list[int], ids: list[int], reply: list[int]) -> float:
    """The share of reply positions where the draft with only ``keep``'s layers proposes the reply's token."""
    args = kernel_layer_args([draft.layers[i] for i in keep])
    sequence = ids + reply
    draft.reset()
    if len(sequence) > draft.capacity:
        draft._grow(len(sequence))
    keys, values = [draft.keys[i] for i in keep], [draft.values[i] for i in keep]
    proposed: list[int] = []
    for start in range(0, len(sequence), MAX_ROWS):
        block = sequence[start : start + MAX_ROWS]
        positions = torch.arange(draft.length, draft.length + len(block))
        x = torch.ops.specdec.decoder_layers(draft.embedding.rows(torch.tensor(block)), draft.cos[positions],
                                             draft.sin[positions], keys, values, draft.length, *args, None)
        draft.length += len(block)
        # Rows len(ids) - 1 .. len(sequence) - 2 predict the reply's tokens.
        first, last = max(start, len(ids) - 1), min(start + len(block), len(sequence) - 1)
        if first < last:
            proposed += draft.head(draft.final_norm(x[first - start : last - start])).argmax(-1).tolist()
    return sum(p == t for p, t in zip(proposed, reply, strict=True)) / len(reply)


with torch.inference_mode():
    suite = [(item.category, ids, greedy_reply(target, ids, REPLY_TOKENS))
             for item in load_suite(default_suite_path()) for ids in [runtime.prompt_ids(item.messages)]]
    layers = range(len(draft.layers))

    def by_category(keep: list[int]) -> dict[str, float]:
        scores: dict[str, list[float]] = {}
        for category, ids, reply in suite:
            scores.setdefault(category, []).append(agreement(keep, ids, reply))
        return {category: statistics.mean(values) for category, values in scores.items()}

    whole = by_category(list(layers))
    print("all layers", {c: round(v, 3) for c, v in whole.items()}, flush=True)
    for skipped in layers:
        without = by_category([i for i in layers if i != skipped])
        drop = statistics.mean(whole[c] - without[c] for c in whole)
        print(f"without layer {skipped}", {c: round(v, 3) for c, v in without.items()}, f"mean drop {drop:.3f}",
              flush=True)
