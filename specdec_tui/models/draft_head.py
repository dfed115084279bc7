"""A draft's output head limited to the ids a reply is likely to need.

A draft step streams its whole head: for the default 0.5B draft, 152k rows of int4 weights, a
quarter of the step's bytes. Most of a reply's tokens are either among the leading ids (a
byte-pair vocabulary numbers its merges in the order they were learnt, frequent ones first) or
already in the conversation (a function's name, a word of the question). ``ContextHead`` computes
the logits of the leading ids and of every id its context has held, and -inf for the rest: the
draft then never proposes an id outside them, which costs acceptance but never the output, since
the target still checks every token.

The limited head reads the whole head's packed weights in place (the leading rows are a prefix of
the packed blocks) and gathers the few blocks that hold the context's ids, so each id it keeps has
the logit the whole head gives it, and no other cache entry is packed for it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from specdec_tui.models import quantized_kernels
from specdec_tui.models.precision import linear_from_tensors, linear_tensors

#: Output columns per weight block of each storable linear kind: a block is the least one can read.
COLUMNS_PER_BLOCK = {"int8": quantized_kernels.INT8_COLUMNS, "int4": quantized_kernels.INT4_COLUMNS, "fp32": 1}


def head_columns(head: nn.Module, blocks: slice | torch.Tensor) -> tuple[nn.Module, torch.Tensor] | None:
    """A linear computing ``head``'s output columns in ``blocks`` (of its weight blocks), and those
    columns' ids; None for a kind without blocks. A slice's packed weights are views, not copies."""
    stored = linear_tensors(head)
    if stored is None or stored[0] not in COLUMNS_PER_BLOCK:
        return None
    kind, parts = stored
    per_block = COLUMNS_PER_BLOCK[kind]
    total = -(-head.out_features // per_block)
    columns = (torch.arange(total)[blocks][:, None] * per_block + torch.arange(per_block)).flatten()

    def part(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() > 1:  # blocks first: packed weights, int4 scales and minimums, fp32 rows
            return tensor[blocks]
        # One value per column (int8 scales and column sums, a bias), padded to whole blocks.
        padded = torch.nn.functional.pad(tensor, (0, total * per_block - tensor.numel()))
        return padded.view(total, per_block)[blocks].reshape(-1)

    subset = {name: part(tensor).contiguous() for name, tensor in parts.items()}
    return linear_from_tensors(kind, subset, head.in_features, len(columns)), columns


class ContextHead(nn.Module):
    """``head``'s logits of ids ``0 .. leading - 1`` (rounded up to a whole block), of ``always``
    and of every id ``see`` was given since ``forget``; -inf for the others."""

    def __init__(self, head: nn.Module, vocab: int, leading: int, always: Iterable[int] = ()) -> None:
        super().__init__()
        self.whole, self.vocab = head, vocab
        stored = linear_tensors(head)
        #: Output columns per weight block; None for a kind without blocks (the whole head is
        #: computed, then masked: the same logits, without the saving).
        self.per_block = COLUMNS_PER_BLOCK.get(stored[0]) if stored is not None else None
        leading = min(leading, vocab)
        blocks = None if self.per_block is None else -(-leading // self.per_block)
        self.leading = None if blocks is None else head_columns(head, slice(0, blocks))
        self.leading_ids = leading if self.per_block is None else min(vocab, blocks * self.per_block)
        self.always = frozenset(t for t in always if self.leading_ids <= t < vocab)
        self.context: set[int] = set()
        self._gathered: tuple[frozenset[int], tuple[nn.Module, torch.Tensor] | None] = (frozenset(), None)

    def see(self, ids: Iterable[int]) -> None:
        self.context.update(t for t in ids if self.leading_ids <= t < self.vocab)

    def forget(self) -> None:
        self.context.clear()

    def kept_ids(self) -> list[int]:
        """The ids past the leading ones whose logits are computed."""
        return sorted(self.context | self.always)

    def _rest(self) -> tuple[nn.Module, torch.Tensor] | None:
        """The blocks that hold the kept ids past the leading ones, gathered again when those change."""
        kept = frozenset(self.kept_ids())
        if kept != self._gathered[0]:
            assert self.per_block is not None
            blocks = torch.tensor(sorted({t // self.per_block for t in kept}), dtype=torch.long)
            self._gathered = (kept, head_columns(self.whole, blocks) if kept else None)
        return self._gathered[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x.new_full((x.shape[0], self.vocab), float("-inf"))
        if self.leading is None:
            kept = torch.tensor([*range(self.leading_ids), *self.kept_ids()], dtype=torch.long)
            logits[:, kept] = self.whole(x)[:, kept]
            return logits
        # A slice copy for the leading ids: a scatter of them all is dearer.
        logits[:, : self.leading_ids] = self.leading[0](x)[:, : self.leading_ids]
        rest = self._rest()
        if rest is not None:
            linear, columns = rest
            inside = columns < self.vocab  # not the last block's padding
            logits[:, columns[inside]] = linear(x)[:, inside]
        return logits
