"""The parts of a Llama-family decoder layer besides its linears, each in two forms.

The plain form is PyTorch's ops. The ``Kernel`` form does the same in one or two calls of the
package's kernels (``quantized_kernels``), computing each row on its own so that a verify block
still equals single steps bit for bit. The factories pick the kernel form where it is built and
covers the shapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec_tui.models import quantized_kernels
from specdec_tui.models.attention import MAX_ROWS


class RmsNorm(nn.Module):
    """RMS norm over the last dimension, in PyTorch's ops."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        # A copy: a view would keep the whole memory-mapped weights file resident.
        self.weight, self.eps = weight.detach().float().clone(), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, [self.weight.shape[0]], self.weight, self.eps)


class KernelRmsNorm(RmsNorm):
    """The same norm in one call of the package's kernel; PyTorch's takes about ten small ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.specdec.rms_norm(x, self.weight, self.eps)


def rms_norm(weight: torch.Tensor, eps: float) -> RmsNorm:
    return KernelRmsNorm(weight, eps) if quantized_kernels.available() else RmsNorm(weight, eps)


class Attention(nn.Module):
    """Self-attention of new rows from their q/k/v projections: rotary, the cache write, and each
    row over the cache up to itself. In PyTorch's ops."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scale = head_dim ** -0.5
        self.max_rows = MAX_ROWS  # an attribute: TorchScript reads no globals

    def attend_block(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int) -> torch.Tensor:
        """A long block (a prompt) in one masked kernel call; ``q`` is (rows, heads, dim), scaled."""
        rows = q.shape[0]
        mask = torch.ones(rows, length + rows, dtype=torch.bool).tril(length)
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0), keys[:, : length + rows].float().unsqueeze(0),
            values[:, : length + rows].float().unsqueeze(0), attn_mask=mask, scale=1.0,
            enable_gqa=self.heads > self.kv_heads,
        )
        return out[0].transpose(0, 1).reshape(rows, -1)

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int) -> torch.Tensor:
        rows = q.shape[0]
        if rows > self.max_rows:
            return self.attend_block(q, keys, values, length)
        groups = self.heads // self.kv_heads
        outputs: list[torch.Tensor] = []
        for row in range(rows):
            # The query heads sharing a key/value head attend as that head's rows: no repeat, no mask.
            stop = length + row + 1
            packed = q[row].view(self.kv_heads, groups, self.head_dim)
            # A float16 cache is widened as it is read (exactly, as the kernels do).
            scores = torch.bmm(packed, keys[:, :stop].float().transpose(1, 2))
            outputs.append(torch.bmm(torch.softmax(scores, dim=-1), values[:, :stop].float()).view(1, -1))
        return outputs[0] if rows == 1 else torch.cat(outputs)

    def forward(self, projected: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, length: int) -> torch.Tensor:
        rows = projected.shape[0]
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        # Rotate queries and keys in one go: their heads sit side by side in the projection.
        qk = projected[:, : q_width + kv_width].view(rows, self.heads + self.kv_heads, self.head_dim)
        qk = qk * cos + qk.roll(self.head_dim // 2, dims=-1) * sin
        v = projected[:, q_width + kv_width :].view(rows, self.kv_heads, self.head_dim)
        keys[:, length : length + rows] = qk[:, self.heads :].transpose(0, 1)
        values[:, length : length + rows] = v.transpose(0, 1)
        return self.attend(qk[:, : self.heads] * self.scale, keys, values, length)


class KernelAttention(Attention):
    """The same attention in two calls of the package's kernels instead of about twenty small ops
    per layer. A prompt's long block too: each row as a single step computes it, so a prompt read in
    one pass leaves the cache its steps would have (and torch's masked kernel was slower: 1.34 against
    0.61 ms a layer at 130 rows, 57 against 30 at 1040, the target's heads on the Xeon)."""

    def forward(self, projected: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, length: int) -> torch.Tensor:
        q = torch.ops.specdec.rotate_into_cache(projected, cos, sin, keys, values, length, self.heads, self.scale)
        return torch.ops.specdec.attend_rows(q, keys, values, length)


def attention(heads: int, kv_heads: int, head_dim: int) -> Attention:
    if quantized_kernels.available() and head_dim in quantized_kernels.ATTENTION_HEAD_SIZES:
        return KernelAttention(heads, kv_heads, head_dim)
    return Attention(heads, kv_heads, head_dim)


class SwiGlu(nn.Module):
    """silu(gate) * up, where gate and up are the two halves of each row of the gate/up projection."""

    def __init__(self, intermediate: int) -> None:
        super().__init__()
        self.intermediate = intermediate

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :]


class KernelSwiGlu(SwiGlu):
    """The same in one call of the package's kernels instead of four ops."""

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        return torch.ops.specdec.silu_mul(gate_up)


def swiglu(intermediate: int) -> SwiGlu:
    return KernelSwiGlu(intermediate) if quantized_kernels.available() and intermediate % 8 == 0 else SwiGlu(intermediate)
