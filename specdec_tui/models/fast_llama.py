"""A lean CPU forward for Llama-family models (Llama, Qwen2, Mistral without sliding windows).

transformers' forward spends a large share of a small model's step in Python and small ops. This
runner takes the same weights and does one decode step with few calls: fused q/k/v and gate/up
projections, a preallocated KV cache, rotary tables, and attention computed one query row at a
time. Row-at-a-time attention plus row-wise int8 linears make a verify block compute bit for bit
what single steps compute (see ``precision`` and ``attention``).

``head_tokens`` keeps only the first N rows of the output head plus the special tokens, a cheaper
head for a draft (Qwen's BPE ids are in merge order, so low ids are the frequent ones); the other
logits come back as -inf, so the draft simply never proposes them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from specdec_tui.models.attention import MAX_ROWS
from specdec_tui.models.precision import PackProgress, pack_linears

SUPPORTED_TYPES = frozenset({"llama", "qwen2", "mistral"})


def supports_fast_llama(model: PreTrainedModel) -> bool:
    config = model.config
    if config.model_type not in SUPPORTED_TYPES or next(model.parameters()).device.type != "cpu":
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default" or getattr(config, "hidden_act", "silu") != "silu":
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return not getattr(config, "mlp_bias", False)


def _fused(*linears: nn.Linear) -> nn.Linear:
    weight = torch.cat([lin.weight.detach().float() for lin in linears])
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=any(lin.bias is not None for lin in linears))
    fused.weight.data = weight
    if fused.bias is not None:
        fused.bias.data = torch.cat([
            lin.bias.detach().float() if lin.bias is not None else torch.zeros(lin.out_features) for lin in linears
        ])
    return fused


def _head_rows(head: nn.Linear, rows: torch.Tensor) -> nn.Linear:
    subset = nn.Linear(head.in_features, len(rows), bias=head.bias is not None)
    subset.weight.data = head.weight.detach().float()[rows].contiguous()
    if head.bias is not None:
        subset.bias.data = head.bias.detach().float()[rows]
    return subset


class FastLlama:
    def __init__(
        self,
        model: PreTrainedModel,
        precision: str,
        exact: bool = True,
        head_tokens: int | None = None,
        keep_tokens: tuple[int, ...] = (),
        on_packed: PackProgress = lambda done, total: None,
    ) -> None:
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.vocab = config.vocab_size
        decoder = model.model
        self.embed = decoder.embed_tokens.weight.detach().float()
        self.input_vocab = self.embed.shape[0]
        self.norms = [(layer.input_layernorm.weight.detach().float(),
                       layer.post_attention_layernorm.weight.detach().float()) for layer in decoder.layers]
        self.final_norm = decoder.norm.weight.detach().float()
        self.intermediate = decoder.layers[0].mlp.gate_proj.out_features

        head = model.lm_head
        self.head_ids: torch.Tensor | None = None
        if head_tokens and head_tokens < self.vocab:
            extra = sorted({t for t in keep_tokens if t >= head_tokens})
            self.head_ids = torch.cat([torch.arange(head_tokens), torch.tensor(extra, dtype=torch.long)])
            head = _head_rows(head, self.head_ids)
        linears: list[nn.Linear] = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            linears += [_fused(attn.q_proj, attn.k_proj, attn.v_proj), attn.o_proj,
                        _fused(mlp.gate_proj, mlp.up_proj), mlp.down_proj]
        packed = pack_linears([*linears, head], precision, exact, on_packed)
        self.layers = [packed[i : i + 4] for i in range(0, len(packed) - 1, 4)]
        self.head = packed[-1]

        theta = config.rope_parameters["rope_theta"]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.capacity = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0
        self._grow(256)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.capacity)
        shape = (self.kv_heads, capacity, self.head_dim)
        grown_k = [torch.empty(shape) for _ in self.layers]
        grown_v = [torch.empty(shape) for _ in self.layers]
        for old, new in ((self.keys, grown_k), (self.values, grown_v)):
            for src, dst in zip(old, new, strict=False):  # the first call has nothing to copy
                dst[:, : self.length] = src[:, : self.length]
        self.keys, self.values, self.capacity = grown_k, grown_v, capacity

    def reset(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)

    def _rotary(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin for the new positions: rotate(x) = x cos + roll(x, half) sin."""
        positions = torch.arange(self.length, self.length + rows, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)[:, None, :]
        return torch.cat([angles, angles], dim=-1).cos(), torch.cat([-angles.sin(), angles.sin()], dim=-1)

    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """Causal attention of the new rows ``q`` (rows, heads, dim, already scaled) over the cache."""
        rows = q.shape[0]
        keys, values = self.keys[layer], self.values[layer]
        end = self.length + rows
        groups = self.heads // self.kv_heads
        if rows > MAX_ROWS:
            mask = torch.ones(rows, end, dtype=torch.bool).tril(self.length)
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], keys[None, :, :end], values[None, :, :end],
                attn_mask=mask, scale=1.0, enable_gqa=groups > 1,
            )
            return out[0].transpose(0, 1).reshape(rows, -1)
        outputs = []
        for row in range(rows):
            # The query heads sharing a key/value head attend as that head's rows: no repeat, no mask.
            stop = self.length + row + 1
            packed = q[row].view(self.kv_heads, groups, self.head_dim)
            scores = torch.bmm(packed, keys[:, :stop].transpose(1, 2))
            outputs.append(torch.bmm(torch.softmax(scores, dim=-1), values[:, :stop]).view(1, -1))
        return outputs[0] if rows == 1 else torch.cat(outputs)

    @torch.inference_mode()
    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        rows = len(ids)
        if self.length + rows > self.capacity:
            self._grow(self.length + rows)
        x = self.embed[torch.tensor(ids)]
        cos, sin = self._rotary(rows)
        half, scale = self.head_dim // 2, 1.0 / math.sqrt(self.head_dim)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        width = x.shape[-1]
        for i, ((qkv, out_proj, gate_up, down), (norm_in, norm_post)) in enumerate(zip(self.layers, self.norms, strict=True)):
            h = F.rms_norm(x, (width,), norm_in, self.eps)
            projected = qkv(h)
            # Rotate queries and keys in one go: their heads sit side by side in the projection.
            qk = projected[:, : q_width + kv_width].view(rows, self.heads + self.kv_heads, self.head_dim)
            qk = qk * cos + qk.roll(half, dims=-1) * sin
            v = projected[:, q_width + kv_width :].view(rows, self.kv_heads, self.head_dim)
            self.keys[i][:, self.length : self.length + rows] = qk[:, self.heads :].transpose(0, 1)
            self.values[i][:, self.length : self.length + rows] = v.transpose(0, 1)
            x = x + out_proj(self._attend(i, qk[:, : self.heads] * scale))
            h = F.rms_norm(x, (width,), norm_post, self.eps)
            gu = gate_up(h)
            x = x + down(F.silu(gu[:, : self.intermediate]) * gu[:, self.intermediate :])
        self.length += rows
        logits = self.head(F.rms_norm(x[-n_logits:], (width,), self.final_norm, self.eps))
        if self.head_ids is None:
            return logits
        full = logits.new_full((n_logits, self.vocab), float("-inf"))
        full[:, self.head_ids] = logits
        return full
