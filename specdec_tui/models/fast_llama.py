"""A lean CPU forward for Llama-family models (Llama, Qwen2, Mistral without sliding windows).

transformers' forward spends a large share of a small model's step in Python and small ops. This
runner takes the same weights and does one decode step with few calls: fused q/k/v and gate/up
projections, a preallocated KV cache, rotary tables, and attention computed one query row at a
time. Row-at-a-time attention plus row-wise int8 linears make a verify block compute bit for bit
what single steps compute (see ``precision`` and ``attention``). Where the package's kernels build,
each norm, each SwiGLU and each attention of a short block is one call of them (``layers``).

``head_tokens`` keeps only the first N rows of the output head plus the special tokens, a cheaper
head for a draft (Qwen's BPE ids are in merge order, so low ids are the frequent ones); the other
logits come back as -inf, so the draft simply never proposes them.

The layers run as one TorchScript module where that works (see ``scripting``): the same kernels
with far less per-op overhead, which is most of what a small draft's step costs beyond reading
its weights.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from transformers import PreTrainedModel

from specdec_tui.models.layers import Attention, RmsNorm, SwiGlu, attention, rms_norm, swiglu
from specdec_tui.models.precision import PackProgress, pack_linears
from specdec_tui.models.scripting import scripted

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


class DecoderLayer(nn.Module):
    """One pre-norm attention + SwiGLU block over new rows; their keys and values go into a cache."""

    def __init__(self, linears: list[nn.Module], norms: tuple[RmsNorm, RmsNorm], attention: Attention,
                 activation: SwiGlu) -> None:
        super().__init__()
        self.qkv, self.out_proj, self.gate_up, self.down = linears
        self.norm_in, self.norm_post = norms
        self.attention, self.activation = attention, activation

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, length: int) -> torch.Tensor:
        x = x + self.out_proj(self.attention(self.qkv(self.norm_in(x)), cos, sin, keys, values, length))
        return x + self.down(self.activation(self.gate_up(self.norm_post(x))))


class LayerStack(nn.Module):
    """The decoder layers in order, each with its own slice of the cache."""

    def __init__(self, layers: list[DecoderLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor], length: int) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, keys[i], values[i], length)
        return x


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
        # Copies, not views: a view of a loaded weight keeps the whole memory-mapped file resident.
        self.embed = decoder.embed_tokens.weight.detach().float().clone()
        self.input_vocab = self.embed.shape[0]
        self.final_norm = rms_norm(decoder.norm.weight, self.eps)

        head = model.lm_head
        #: The head's rows are ids 0 .. head_tokens - 1, then ``extra_ids``; None: the whole vocabulary.
        self.head_tokens: int | None = None
        self.extra_ids = torch.empty(0, dtype=torch.long)
        if head_tokens and head_tokens < self.vocab:
            self.head_tokens = head_tokens
            self.extra_ids = torch.tensor(sorted({t for t in keep_tokens if t >= head_tokens}), dtype=torch.long)
            head = _head_rows(head, torch.cat([torch.arange(head_tokens), self.extra_ids]))
        # Fused weights are made as each is packed, so only a few fp32 copies exist at a time.
        linears: list[nn.Linear | Callable[[], nn.Linear]] = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            linears += [partial(_fused, attn.q_proj, attn.k_proj, attn.v_proj), attn.o_proj,
                        partial(_fused, mlp.gate_proj, mlp.up_proj), mlp.down_proj]
        packed = pack_linears([*linears, head], precision, exact, on_packed)
        self.head = packed[-1]
        self.layers = [
            DecoderLayer(
                packed[4 * i : 4 * i + 4],
                (rms_norm(layer.input_layernorm.weight, self.eps), rms_norm(layer.post_attention_layernorm.weight, self.eps)),
                attention(self.heads, self.kv_heads, self.head_dim), swiglu(layer.mlp.gate_proj.out_features),
            )
            for i, layer in enumerate(decoder.layers)
        ]
        self.stack = scripted(LayerStack(self.layers))

        theta = config.rope_parameters["rope_theta"]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.capacity = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0
        self._grow(256)
        if isinstance(self.stack, torch.jit.ScriptModule):
            # TorchScript profiles the first call and optimizes on the second (about a second for
            # a 1.5B model): pay that while loading, not in the first reply.
            for _ in range(2):
                self.forward([0], 1)
            self.reset()

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

    @torch.inference_mode()
    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        rows = len(ids)
        if self.length + rows > self.capacity:
            self._grow(self.length + rows)
        x = self.embed[torch.tensor(ids)]
        cos, sin = self._rotary(rows)
        x = self.stack(x, cos, sin, self.keys, self.values, self.length)
        self.length += rows
        logits = self.head(self.final_norm(x[-n_logits:]))
        if self.head_tokens is None:
            return logits
        # A slice copy for the leading ids: scattering all of them through an index costs 73 us, this 21.
        full = logits.new_full((n_logits, self.vocab), float("-inf"))
        full[:, : self.head_tokens] = logits[:, : self.head_tokens]
        full[:, self.extra_ids] = logits[:, self.head_tokens :]
        return full
