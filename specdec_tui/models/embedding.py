"""The input embedding table: dense rows, or a GGUF file's own quantized rows dequantized on lookup.

A step looks up a handful of rows of a table with ~150k of them, so the table's size matters for
disk and memory, not for speed. A model that came from a GGUF file keeps its ``token_embd`` blocks
as they are (a Q4_K table is a seventh of its fp32 size) and dequantizes only the rows a step
reads, with the same function transformers used to load the model: the numbers are the same bits.
Q5_0 and Q4_K rows (the default pair's) go through the package's kernel (``gguf_rows``), which
computes the same bits in one call; other types through gguf's numpy.
"""

from __future__ import annotations

import gguf
import numpy as np
import torch

from specdec_tui.models import quantized_kernels
from specdec_tui.models.gguf_weights import GgufWeights

GGUF_EMBEDDING = "token_embd.weight"
#: The quantization types ``torch.ops.specdec.gguf_rows`` dequantizes.
KERNEL_TYPES = frozenset({gguf.GGMLQuantizationType.Q5_0, gguf.GGMLQuantizationType.Q4_K})


class DenseEmbedding:
    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.rows_total = weight.shape[0]

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids]

    def tensors(self) -> tuple[dict[str, torch.Tensor], dict]:
        return {"embed": self.weight}, {"kind": "dense"}


class GgufEmbedding:
    """Rows of a GGUF quantized table: ``blocks`` is [rows, bytes per row] of ``quant_type`` blocks."""

    def __init__(self, blocks: torch.Tensor, quant_type: int) -> None:
        self.blocks = blocks
        self.quant_type = gguf.GGMLQuantizationType(quant_type)
        self.rows_total = blocks.shape[0]
        self.on_kernel = self.quant_type in KERNEL_TYPES and blocks.is_contiguous() and quantized_kernels.available()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        if self.on_kernel:
            return torch.ops.specdec.gguf_rows(self.blocks, ids, int(self.quant_type))
        values = gguf.dequantize(self.blocks[ids].numpy(), self.quant_type)
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))

    def tensors(self) -> tuple[dict[str, torch.Tensor], dict]:
        return {"embed.blocks": self.blocks}, {"kind": "gguf", "quant_type": int(self.quant_type)}


Embedding = DenseEmbedding | GgufEmbedding


def embedding_from_tensors(tensors: dict[str, torch.Tensor], meta: dict) -> Embedding:
    if meta["kind"] == "gguf":
        return GgufEmbedding(tensors["embed.blocks"], meta["quant_type"])
    return DenseEmbedding(tensors["embed"])


def gguf_embedding(weights: GgufWeights, loaded: torch.Tensor) -> GgufEmbedding | None:
    """``weights``' quantized embedding table, if it dequantizes to exactly ``loaded`` (the table the
    model was loaded with); None for an unquantized table or one a loader changed on the way."""
    blocks = weights.blocks(GGUF_EMBEDDING) if GGUF_EMBEDDING in weights else None
    if blocks is None or blocks[0].shape[0] != loaded.shape[0]:
        return None
    embedding = GgufEmbedding(*blocks)
    step = 4096  # a chunk at a time: dequantizing the whole table at once would need its fp32 size again
    for start in range(0, embedding.rows_total, step):
        ids = torch.arange(start, min(start + step, embedding.rows_total))
        if not torch.equal(embedding.rows(ids), loaded[start : start + step]):
            return None
    return embedding
