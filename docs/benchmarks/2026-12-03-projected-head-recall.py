"""How often a cheap projected draft head would still find the draft's own greedy token (2026-12-03;
this folder's README, "A pass's own overhead, paired"). Measured offline, nothing of it is in the engine.

The default draft's int4 output head (152k ids x 896) is 2.2 ms of its 10.2 ms token. A head over a
rank-r projection, W U (U^T h), reads r / 896 of those bytes; if the exact head then scored only the
top n ids of that estimate, the draft would propose the same token whenever its greedy token is
among them. Hidden states: the draft's own greedy continuations (48 tokens) of the 28 suite prompts,
the final norm's output at each step; the exact token is the argmax of the int4 head's logits (the
kernel's). U from the weights (the top eigenvectors of W^T W) or from the hidden states (those of
h h^T over every other row, tested on the rows between them).

Run: .venv/bin/python docs/benchmarks/2026-12-03-projected-head-recall.py
Output of that day: 2026-12-03-projected-head-recall.txt beside this file.
"""

from __future__ import annotations

import torch
from paired_levers import lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.precision import PackedInt4Linear
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
draft = lean_forward(runtime.pair.draft.runner)
head = draft.head
assert isinstance(head, PackedInt4Linear)


def dequantized(linear: PackedInt4Linear) -> torch.Tensor:
    """[out, in] float32: the int4 weights as the kernel reads them (``pack_int4``'s layout undone)."""
    blocks, groups = linear.packed.shape[:2]
    nibbles = torch.stack([linear.packed & 15, linear.packed >> 4], dim=-1)  # [block, group, step, column, i, nibble]
    q = nibbles.permute(0, 3, 1, 2, 5, 4).reshape(blocks * 8, groups, 64).float()

    def per_column(values: torch.Tensor) -> torch.Tensor:
        return values.view(torch.float16).float().view(blocks, groups, 8).transpose(1, 2).reshape(blocks * 8, groups, 1)

    weight = (q * per_column(linear.scales) + per_column(linear.minimums)).view(blocks * 8, groups * 64)
    return weight[: linear.out_features, : linear.in_features]


hidden: list[torch.Tensor] = []


class Capture(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden.append(x.reshape(-1, x.shape[-1]).clone())
        return head(x)


draft.head = Capture()
with torch.inference_mode():
    for item in load_suite(default_suite_path()):
        draft.reset()
        logits = draft.forward(runtime.prompt_ids(item.messages), 1)
        for _ in range(48):
            logits = draft.forward([int(logits[-1].argmax())], 1)
    draft.head = head
    states = torch.cat(hidden)
    best = head(states).argmax(dim=-1)
    weight = dequantized(head)
    print(f"{len(states)} hidden states; head {tuple(weight.shape)}")

    def recall(basis: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor, label: str) -> None:
        estimate = (rows @ basis) @ (weight @ basis).T
        for n in (8, 32, 128, 512):
            found = (estimate.topk(n, dim=-1).indices == tokens[:, None]).any(dim=-1).float().mean().item()
            print(f"{label}, rank {basis.shape[1]}: greedy token among the top {n}: {found:.4f}")

    for source, gram, rows, tokens in (("weights' W^T W", weight.T @ weight, states, best),
                                       ("hidden states' h h^T", states[::2].T @ states[::2], states[1::2], best[1::2])):
        values, vectors = torch.linalg.eigh(gram)
        order = values.argsort(descending=True)
        for rank in (64, 128, 256):
            recall(vectors[:, order[:rank]], rows, tokens, f"U from the {source}")
