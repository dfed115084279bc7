"""Causal attention that computes a short block of queries exactly as single steps would.

A verify pass feeds K+1 tokens to the target. Masked attention over that block takes other kernel
paths than a one-token decode step, so its numbers can differ in the last bits and, on a near tie,
flip an argmax. Here each query row of a short block attends with no mask to exactly the keys a
single step at that position would see, through the same SDPA call, so the rows are bit-identical
to single steps. Long blocks (prefill) take the ordinary causal kernel: prefill has the same shape
in every mode.

Registered with transformers under the name ``ROW_EXACT`` (by ``use_row_exact``, so that only a
run with a transformers model imports its modeling stack); a model opts in through
``config._attn_implementation``. Batch size 1 without padding is assumed, which is how the engine
runs, so no mask is built.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROW_EXACT = "specdec_row_exact"
#: Blocks up to this many query rows are computed row by row.
MAX_ROWS = 64


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, groups: int, scaling: float | None,
            causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        query, key, value, scale=scaling, is_causal=causal, enable_gqa=groups > 1
    )


def row_exact_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Attention for (batch, heads, rows, dim) queries; returns (batch, rows, heads, dim)."""
    if sliding_window is not None:
        raise ValueError("row-exact attention does not support sliding-window attention")
    batch, heads, rows, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    if rows > MAX_ROWS:
        if kv_len == rows:
            out = _attend(query, key, value, groups, scaling, causal=True)
        else:
            mask = torch.ones(rows, kv_len, dtype=torch.bool).tril(kv_len - rows)
            out = F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, scale=scaling, enable_gqa=groups > 1
            )
        return out.transpose(1, 2).contiguous(), None
    outputs = []
    for row in range(rows):
        # The heads that share a key/value head become that head's query rows: no repeat, no mask.
        packed = query[:, :, row].reshape(batch, kv_heads, groups, dim)
        end = kv_len - rows + 1 + row
        out = F.scaled_dot_product_attention(packed, key[:, :, :end], value[:, :, :end], scale=scaling)
        outputs.append(out.reshape(batch, 1, heads, dim))
    return torch.cat(outputs, dim=1), None


def use_row_exact(config: object) -> None:
    """Point ``config``'s model at ``row_exact_attention`` where it covers the model's attention."""
    if supports_row_exact(config):
        from transformers import AttentionInterface

        AttentionInterface.register(ROW_EXACT, row_exact_attention)
        config._attn_implementation = ROW_EXACT  # type: ignore[attr-defined]


def supports_row_exact(config: object) -> bool:
    """Whether ``config`` describes plain causal self-attention that ``row_exact_attention`` covers."""
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return False
    layer_types = getattr(config, "layer_types", None) or []
    return all(kind == "full_attention" for kind in layer_types)
