"""A GGUF Q4_K tensor's 4-bit indices with each sub-block's step and offset, read from its blocks.

A Q4_K block covers 256 inputs of one row: two float16 scales (d, dmin), twelve bytes of 6-bit
sub-block scales and minimums, and 128 bytes of indices. Each of its eight sub-blocks of 32 inputs
holds ``d * scale * q - dmin * minimum``; those two products, in float32 as ``gguf`` computes them, are
the sub-block's step and offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import Q4_K

if TYPE_CHECKING:  # gguf_weights packs with precision, which reads q4k
    from specdec_tui.models.gguf_weights import GgufWeights

BLOCK_INPUTS = 256
BLOCK_BYTES = 144
SUB_BLOCK_INPUTS = 32

#: A Q4_K tensor's indices [N, K], and steps and offsets [N, K / 32] (``q4k_parts``).
Q4kParts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def q4k_parts(blocks: np.ndarray, rows: int, width: int) -> Q4kParts:
    """Indices [rows, width] (uint8 in [0, 15]) and steps and offsets [rows, width / 32] (float32) of
    the Q4_K tensor whose raw blocks are ``blocks`` (uint8, ``rows * width / 256`` blocks of 144 bytes)."""
    if width % BLOCK_INPUTS or blocks.size != rows * width // BLOCK_INPUTS * BLOCK_BYTES:
        raise ValueError(f"q4k_parts: {blocks.size} bytes are not a {rows} x {width} Q4_K tensor")
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, BLOCK_BYTES)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
    scale, minimum = Q4_K.get_scale_min(raw[:, 4:16])
    steps = d * scale.astype(np.float32)
    offsets = dmin * minimum.astype(np.float32)
    # 32 bytes a pair of sub-blocks: the first's indices in the low nibbles, the second's in the high
    packed = raw[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    indices = (packed & np.uint8(0x0F)).reshape(rows, width)
    per_row = width // SUB_BLOCK_INPUTS
    return (torch.from_numpy(indices.copy()), torch.from_numpy(steps.reshape(rows, per_row).copy()),
            torch.from_numpy(offsets.reshape(rows, per_row).copy()))


def q4k_weight(parts: Q4kParts) -> torch.Tensor:
    """The float weights [N, K] of a Q4_K tensor's parts, as ``gguf`` dequantizes them."""
    indices, steps, offsets = parts
    rows, width = indices.shape
    picked = indices.view(rows, steps.shape[1], width // steps.shape[1]).float()
    return (picked * steps[..., None] - offsets[..., None]).view(rows, width)


class Q4kTensors:
    """A GGUF file's Q4_K tensors by name, read on demand."""

    def __init__(self, weights: GgufWeights) -> None:
        self.weights = weights
        self.tensors = {name: tensor for name, tensor in self.weights.tensors.items()
                        if tensor.tensor_type == GGMLQuantizationType.Q4_K}

    def parts(self, names: Sequence[str]) -> Q4kParts | None:
        """``q4k_parts`` of the named tensors stacked row after row (a fused linear's), or None where
        one of them is not a Q4_K tensor of the file."""
        if not all(name in self.tensors for name in names):
            return None
        parts = []
        for name in names:
            tensor = self.tensors[name]
            width, rows = tensor.shape
            parts.append(q4k_parts(self.weights.raw(name), rows, width))
        indices, steps, offsets = zip(*parts, strict=True)
        return torch.cat(indices), torch.cat(steps), torch.cat(offsets)
