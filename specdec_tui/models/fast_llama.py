"""A lean CPU forward for Llama-family models (Llama, Qwen2, Mistral without sliding windows).

transformers' forward spends a large share of a small model's step in Python and small ops. This
runner takes the same weights and does one decode step with few calls: fused q/k/v and gate/up
projections, a preallocated KV cache, rotary tables, and attention computed one query row at a
time. Row-at-a-time attention plus row-wise int8 linears make a verify block compute bit for bit
what single steps compute (see ``precision`` and ``attention``). Where the package's kernels build,
each norm, each SwiGLU and each attention of a short block is one call of them (``layers``).

``limit_head`` gives a draft a cheaper output head: the leading ids and those of its context
(``draft_head``); the other logits come back as -inf, so the draft never proposes them.

Per-op overhead is most of what a small draft's step costs beyond reading its weights, so it is
kept out of a step: where every part of a layer is the package's kernels, a short block runs all
the layers in one kernel call (``decoder_layers``, the same functions in the same order as the
modules); elsewhere the layers run as one TorchScript module where that works (see ``scripting``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import nn

from specdec_tui.models.attention import MAX_ROWS
from specdec_tui.models.draft_head import ContextHead
from specdec_tui.models.embedding import (
    GGUF_EMBEDDING,
    DenseEmbedding,
    Embedding,
    GgufEmbedding,
    embedding_from_tensors,
)
from specdec_tui.models.gguf_weights import GgufWeights
from specdec_tui.models.kv_cache import KVCache
from specdec_tui.models.layers import (
    Attention,
    KernelAttention,
    KernelRmsNorm,
    KernelSwiGlu,
    RmsNorm,
    SwiGlu,
    attention,
    rms_norm,
    swiglu,
)
from specdec_tui.models.memory import file_mapped
from specdec_tui.models.precision import (
    IndexedInt8Linear,
    PackProgress,
    float_linear,
    linear_from_tensors,
    linear_tensors,
    pack_linears,
)
from specdec_tui.models.q4k import Q4kTensors
from specdec_tui.models.scripting import scripted

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

SUPPORTED_TYPES = frozenset({"llama", "qwen2", "mistral"})


def supports_fast_llama(model: PreTrainedModel) -> bool:
    return next(model.parameters()).device.type == "cpu" and supports_config(model.config)


def supports_config(config: PretrainedConfig) -> bool:
    """Whether the lean forward computes a model of ``config``."""
    if config.model_type not in SUPPORTED_TYPES:
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default" or getattr(config, "hidden_act", "silu") != "silu":
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return not getattr(config, "mlp_bias", False)


def _fused(*linears: nn.Linear) -> nn.Linear:
    weight = torch.cat([lin.weight.detach().float() for lin in linears])
    bias = torch.cat([
        lin.bias.detach().float() if lin.bias is not None else torch.zeros(lin.out_features) for lin in linears
    ]) if any(lin.bias is not None for lin in linears) else None
    return float_linear(weight, bias)


def _gguf_linear(weights: GgufWeights, stems: Sequence[str]) -> nn.Linear:
    """The linear of GGUF tensors ``stems``, fused (``_fused``) where there are several."""
    linears = [weights.linear(stem) for stem in stems]
    return linears[0] if len(linears) == 1 else _fused(*linears)


class DecoderLayer(nn.Module):
    """One pre-norm attention + SwiGLU block over new rows; their keys and values go into a cache."""

    def __init__(self, linears: list[nn.Module], norms: tuple[RmsNorm, RmsNorm], attention: Attention,
                 activation: SwiGlu) -> None:
        super().__init__()
        self.qkv, self.out_proj, self.gate_up, self.down = linears
        self.norm_in, self.norm_post = norms
        self.attention, self.activation = attention, activation

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, length: int, kept_rows: int = 0) -> torch.Tensor:
        """The rows after this layer; where ``kept_rows`` > 0, only the last ``kept_rows`` of them (every
        row's keys and values still go into the cache)."""
        attended = self.attention(self.qkv(self.norm_in(x)), cos, sin, keys, values, length)
        if kept_rows > 0:
            x, attended = x[-kept_rows:], attended[-kept_rows:]
        x = x + self.out_proj(attended)
        return x + self.down(self.activation(self.gate_up(self.norm_post(x))))


class LayerStack(nn.Module):
    """The decoder layers in order, each with its own slice of the cache."""

    def __init__(self, layers: list[DecoderLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor], length: int, kept_rows: int = 0) -> torch.Tensor:
        """The rows after the last layer, only the last ``kept_rows`` of them where that is > 0: no later
        layer reads the others, so the last layer's projections and MLP skip them."""
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, keys[i], values[i], length, kept_rows if i == last else 0)
        return x


#: The most rows of a prompt one pass reads (longer prompts go in several).
PROMPT_ROWS = 256
#: A decoder layer's linears, in the order ``DecoderLayer`` takes them.
LAYER_LINEARS = ("qkv", "out_proj", "gate_up", "down")
#: Bumped when what a packed file holds, or how it is laid out, changes.
PACKED_FORMAT = 2
#: The ``kinds`` code of each linear ``decoder_layers`` runs, by its kind in a packed file.
KERNEL_LINEAR_KINDS = {"int8": 8, "int4": 4, "int8-indexed": 9}
#: The weight tensors ``decoder_layers`` takes for each linear (the unused ones empty).
KERNEL_LINEAR_TENSORS = 4
#: The GGUF tensors of each of a layer's linears, in ``LAYER_LINEARS``' order.
GGUF_LAYER_TENSORS = (("attn_q", "attn_k", "attn_v"), ("attn_output",), ("ffn_gate", "ffn_up"), ("ffn_down",))
#: ``decoder_layers``' bias for a linear without one.
NO_BIAS = torch.empty(0)


def kernel_layer_args(layers: Sequence[DecoderLayer]) -> tuple | None:
    """What ``torch.ops.specdec.decoder_layers`` takes after the caches' length to run ``layers`` in one
    call, or None where a part of a layer is not the package's kernels."""
    parts = [(layer.norm_in, layer.norm_post, layer.attention, layer.activation) for layer in layers]
    kernels = (KernelRmsNorm, KernelRmsNorm, KernelAttention, KernelSwiGlu)
    if not layers or not all(isinstance(part, kind) for each in parts for part, kind in zip(each, kernels, strict=True)):
        return None
    # Each linear's kind and tensors as a packed file stores them: packed, scales, then column sums
    # (int8) or minimums (int4), an indexed int8 linear's records, and the bias if it has one.
    stored = [linear_tensors(getattr(layer, name)) for layer in layers for name in LAYER_LINEARS]
    if any(linear is None or linear[0] not in KERNEL_LINEAR_KINDS for linear in stored):
        return None
    kinds, tensors = zip(*stored, strict=True)
    weights = []
    for parts in tensors:
        kept = [tensor for name, tensor in parts.items() if name != "bias"]
        weights += kept + [NO_BIAS] * (KERNEL_LINEAR_TENSORS - len(kept))
    biases = [parts.get("bias", NO_BIAS) for parts in tensors]
    norms = [weight for layer in layers for weight in (layer.norm_in.weight, layer.norm_post.weight)]
    first = layers[0]
    return (first.attention.heads, first.attention.scale, first.norm_in.eps, norms,
            [KERNEL_LINEAR_KINDS[kind] for kind in kinds], weights, biases,
            [getattr(first, name).out_features for name in LAYER_LINEARS])


@dataclass(frozen=True)
class LlamaShape:
    """What the forward needs to know of a model's configuration."""

    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    vocab: int
    rope_theta: float
    intermediate: int

    @classmethod
    def of(cls, config: PretrainedConfig) -> LlamaShape:
        heads = config.num_attention_heads
        return cls(heads, config.num_key_value_heads, getattr(config, "head_dim", None) or config.hidden_size // heads,
                   config.rms_norm_eps, config.vocab_size, config.rope_parameters["rope_theta"],
                   config.intermediate_size)


@dataclass
class LayerWeights:
    linears: list[nn.Module]  # in LAYER_LINEARS order
    norm_in: torch.Tensor
    norm_post: torch.Tensor


class FastLlama:
    def __init__(
        self,
        shape: LlamaShape,
        embedding: Embedding,
        final_norm: torch.Tensor,
        layers: list[LayerWeights],
        head: nn.Module,
    ) -> None:
        self.shape = shape
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.eps, self.vocab = shape.eps, shape.vocab
        self.embedding = embedding
        self.input_vocab = embedding.rows_total
        self.final_norm = rms_norm(final_norm, self.eps)
        self.head = head
        #: The head limited to the leading ids and the context's (``limit_head``); None: the whole head.
        self.context_head: ContextHead | None = None
        self.layers = [
            DecoderLayer(layer.linears, (rms_norm(layer.norm_in, self.eps), rms_norm(layer.norm_post, self.eps)),
                         attention(self.heads, self.kv_heads, self.head_dim), swiglu(shape.intermediate))
            for layer in layers
        ]
        # Where every layer is the package's kernels, a block of up to MAX_ROWS rows runs the layers in
        # one kernel call: no TorchScript to compile at every start, and none of the 20-60 us a layer
        # that a call per layer spent getting there. Longer blocks (prompts) run the layers' modules,
        # whose Python costs little next to that much arithmetic.
        self.kernel_layers = kernel_layer_args(self.layers)
        self.stack = LayerStack(self.layers) if self.kernel_layers is not None else scripted(LayerStack(self.layers))

        theta = shape.rope_theta
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.cos = self.sin = torch.empty(0)
        self.use_cache(KVCache(len(self.layers), self.kv_heads, self.head_dim, 256))
        self.length = 0
        #: Positions from cache index ``gap_at`` on are numbered ``gap`` past their index (``drop``).
        self.gap_at = self.gap = 0
        # TorchScript profiles the first call and optimizes on the second (about a second for a 1.5B
        # model); the kernel layers need one pass, which pages the mapped weights in. Pay that while
        # loading, not in the first reply.
        for _ in range(2 if isinstance(self.stack, torch.jit.ScriptModule) else 1):
            self.forward([0], 1)
        self.reset()

    @classmethod
    def from_model(
        cls,
        model: PreTrainedModel,
        precision: str,
        exact: bool = True,
        on_packed: PackProgress = lambda done, total: None,
        q4k: Q4kTensors | None = None,
    ) -> FastLlama:
        """The forward of ``model``'s weights packed at ``precision`` (``exact``: for a target).
        ``q4k``: the Q4_K tensors of the GGUF file ``model`` was read from, whose linears then hold
        their int8 weights as indices too (``IndexedInt8Linear``)."""
        decoder = model.model
        # Fused weights are made as each is packed, so only a few fp32 copies exist at a time.
        linears: list[nn.Linear | Callable[[], nn.Linear]] = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            linears += [partial(_fused, attn.q_proj, attn.k_proj, attn.v_proj), attn.o_proj,
                        partial(_fused, mlp.gate_proj, mlp.up_proj), mlp.down_proj]
        # Copies, not views: a view of a loaded weight keeps the whole memory-mapped file resident.
        norms = [(layer.input_layernorm.weight.detach().float().clone(),
                  layer.post_attention_layernorm.weight.detach().float().clone()) for layer in decoder.layers]
        embedding = DenseEmbedding(decoder.embed_tokens.weight.detach().float().clone())
        return cls._packed(LlamaShape.of(model.config), [*linears, model.lm_head], norms, embedding,
                           decoder.norm.weight.detach().float().clone(), precision, exact, on_packed, q4k)

    @classmethod
    def from_gguf(
        cls,
        weights: GgufWeights,
        config: PretrainedConfig,
        precision: str,
        exact: bool = True,
        on_packed: PackProgress = lambda done, total: None,
        q4k: Q4kTensors | None = None,
    ) -> FastLlama:
        """``from_model`` of the model in GGUF file ``weights`` (its configuration ``config``), without
        the float32 model: each linear is dequantized while it is packed. The same bits where
        ``weights.architecture`` is one transformers loads as stored (``AS_STORED``)."""
        count = config.num_hidden_layers
        linears: list[nn.Linear | Callable[[], nn.Linear]] = [
            partial(_gguf_linear, weights, [f"blk.{i}.{name}" for name in names])
            for i in range(count) for names in GGUF_LAYER_TENSORS
        ]
        # No output tensor: the head is the embedding table (tied), as transformers loads it.
        head = partial(weights.linear, "output" if "output.weight" in weights else "token_embd")
        norms = [(weights.tensor(f"blk.{i}.attn_norm.weight"), weights.tensor(f"blk.{i}.ffn_norm.weight"))
                 for i in range(count)]
        blocks = weights.blocks(GGUF_EMBEDDING)
        embedding = (GgufEmbedding(*blocks) if blocks is not None
                     else DenseEmbedding(weights.tensor(GGUF_EMBEDDING)))
        return cls._packed(LlamaShape.of(config), [*linears, head], norms, embedding,
                           weights.tensor("output_norm.weight"), precision, exact, on_packed, q4k)

    @classmethod
    def _packed(
        cls,
        shape: LlamaShape,
        linears: Sequence[nn.Linear | Callable[[], nn.Linear]],
        norms: Sequence[tuple[torch.Tensor, torch.Tensor]],
        embedding: Embedding,
        final_norm: torch.Tensor,
        precision: str,
        exact: bool,
        on_packed: PackProgress,
        q4k: Q4kTensors | None,
    ) -> FastLlama:
        """The forward of ``linears`` (four a layer in ``LAYER_LINEARS`` order, then the head) packed at
        ``precision``, and each layer's two norms."""
        sources = [] if q4k is None else [
            partial(q4k.parts, [f"blk.{i}.{name}.weight" for name in names])
            for i in range(len(norms)) for names in GGUF_LAYER_TENSORS
        ]
        # The head first: its float weights (0.9 GB for the default target) then exist beside few packed
        # linears, not beside all of them.
        head, *packed = pack_linears([linears[-1], *linears[:-1]], precision, exact, on_packed,
                                     [lambda: None, *sources])
        layers = [LayerWeights(packed[4 * i : 4 * i + 4], *norm) for i, norm in enumerate(norms)]
        return cls(shape, embedding, final_norm, layers, head)

    def packed_state(self) -> tuple[dict[str, torch.Tensor], dict] | None:
        """Every tensor of this forward, and what ``from_packed`` needs to put them back together;
        None when a linear is of a kind that cannot be stored."""
        tensors, embedding = self.embedding.tensors()
        tensors["final_norm"] = self.final_norm.weight
        linears: dict[str, dict] = {}
        named = [(f"layers.{i}.{name}", getattr(layer, name))
                 for i, layer in enumerate(self.layers) for name in LAYER_LINEARS]
        for prefix, module in [*named, ("head", self.head)]:
            stored = linear_tensors(module)
            if stored is None:
                return None
            kind, parts = stored
            linears[prefix] = {"kind": kind, "in": module.in_features, "out": module.out_features}
            tensors.update({f"{prefix}.{part}": tensor for part, tensor in parts.items()})
        for i, layer in enumerate(self.layers):
            tensors[f"layers.{i}.norm_in"] = layer.norm_in.weight
            tensors[f"layers.{i}.norm_post"] = layer.norm_post.weight
        meta = {"format": PACKED_FORMAT, "shape": asdict(self.shape), "layers": len(self.layers),
                "linears": linears, "embedding": embedding}
        return {name: tensor.contiguous() for name, tensor in tensors.items()}, meta

    @classmethod
    def from_packed(cls, tensors: dict[str, torch.Tensor], meta: dict) -> FastLlama:
        """The forward that ``packed_state`` described, using ``tensors`` in place (memory-mapped)."""
        if meta.get("format") != PACKED_FORMAT:
            raise ValueError(f"packed format {meta.get('format')}, expected {PACKED_FORMAT}")

        def linear(prefix: str) -> nn.Module:
            spec = meta["linears"][prefix]
            parts = {name[len(prefix) + 1 :]: t for name, t in tensors.items() if name.startswith(prefix + ".")}
            return linear_from_tensors(spec["kind"], parts, spec["in"], spec["out"])

        layers = [
            LayerWeights([linear(f"layers.{i}.{name}") for name in LAYER_LINEARS],
                         tensors[f"layers.{i}.norm_in"], tensors[f"layers.{i}.norm_post"])
            for i in range(meta["layers"])
        ]
        return cls(LlamaShape(**meta["shape"]), embedding_from_tensors(tensors, meta["embedding"]),
                   tensors["final_norm"], layers, linear("head"))

    def use_cache(self, cache: KVCache) -> None:
        """Keep keys and values in ``cache``, with the rotary tables for every position it holds."""
        self.cache = cache
        self._rotary_through(cache.capacity)

    def convert_kv_to(self, dtype: torch.dtype) -> None:
        """Keep keys and values as ``dtype`` from now on, the positions held converted (rounded to nearest
        where narrower): for a draft, whose numbers only decide what it proposes."""
        if dtype != self.cache.dtype:
            self.use_cache(self.cache.grown(self.cache.capacity, self.length, dtype))

    def keep_kv_in(self, dtype: torch.dtype) -> None:
        """Keep keys and values as ``dtype`` (float16 or float32) from now on, in an empty cache."""
        if dtype != self.cache.dtype:
            self.use_cache(KVCache(len(self.layers), self.kv_heads, self.head_dim, self.cache.capacity, dtype))
            self.reset()

    @property
    def int8_block_bytes(self) -> int:
        """The bytes of int8 blocks held by linears that also hold indices (what ``drop_int8_blocks``
        lets go)."""
        return sum(linear.packed.numel() for linear in self._indexed_linears())

    @property
    def int8_blocks_mapped(self) -> bool:
        """Whether those blocks lie in a mapped file (a packed cache entry), not in this process's own
        memory (a target packed at this start)."""
        indexed = [linear for linear in self._indexed_linears() if linear.packed.numel()]
        return bool(indexed) and file_mapped(indexed[0].packed)

    def _indexed_linears(self) -> list[IndexedInt8Linear]:
        return [linear for layer in self.layers for name in LAYER_LINEARS
                if isinstance(linear := getattr(layer, name), IndexedInt8Linear)]

    def drop_int8_blocks(self, at_least: int | None = None) -> int:
        """Make every call of the linears that hold their Q4_K weights both ways read the indices, and let
        their int8 blocks go (``IndexedInt8Linear.drop_blocks``): the same numbers in about 1.1 GB less
        memory for the default target, slower passes of four rows or more. Needs AVX-512 VNNI
        (``quantized_kernels.reads_indices``). ``at_least``: only as many linears, from the last layer
        back, as hold that many bytes of blocks (all where that is more than they hold). Returns how
        many linears dropped theirs."""
        remaining = math.inf if at_least is None else at_least
        dropped = 0
        for linear in reversed(self._indexed_linears()):
            if remaining <= 0:
                break
            if linear.packed.numel():
                remaining -= linear.packed.numel()
                linear.drop_blocks()
                dropped += 1
        self._linears_changed()
        return dropped

    @property
    def released_int8_block_bytes(self) -> int:
        """The bytes of dropped int8 blocks a mapped file still holds (what ``take_int8_blocks_back`` can
        take back)."""
        return sum(linear.released_blocks.numel() for linear in self._indexed_linears()
                   if linear.released_blocks is not None)

    def take_int8_blocks_back(self, at_most: int) -> int:
        """Undo ``drop_int8_blocks`` for as many linears, the latest dropped first (the lowest layer's), as
        hold at most ``at_most`` bytes of blocks between them, so that the dropped ones stay the last
        layers'. The same numbers; passes of four rows or more read the blocks again. Returns how many
        linears took theirs back."""
        taken = 0
        for linear in self._indexed_linears():
            if linear.released_blocks is None:
                continue
            if linear.released_blocks.numel() > at_most:
                break
            at_most -= linear.take_blocks_back()
            taken += 1
        self._linears_changed()
        return taken

    def _linears_changed(self) -> None:
        if self.kernel_layers is not None:  # they hold the linears' tensors too
            self.kernel_layers = kernel_layer_args(self.layers)

    def release_cache_past(self, positions: int) -> int:
        """Hand back the cache's pages past ``positions`` and past what it holds now (positions a longer
        conversation wrote, which nothing reads again); the bytes handed back."""
        return self.cache.release_past(max(positions, self.length))

    def _grow(self, needed: int) -> None:
        self.use_cache(self.cache.grown(max(needed, 2 * self.cache.capacity), self.length))

    def reset(self) -> None:
        self.length = 0
        self.gap_at = self.gap = 0
        if self.context_head is not None:
            self.context_head.forget()

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)

    #: ``drop`` forgets positions from the middle of the cache (``DroppingRunner``).
    drops_positions = True

    @torch.inference_mode()
    def drop(self, at: int, count: int) -> None:
        """Forget the ``count`` positions from cache index ``at`` on (those held), the later ones moved down
        in place, each keeping its position: from index ``at`` on, held or fed later, a position is
        ``count`` past its index (past an earlier drop's, which must have been at ``at`` too). For a
        draft reading a window of a long context: where the window moves, nothing is read again."""
        if self.gap and at != self.gap_at:
            raise ValueError(f"a drop at index {at} after one at {self.gap_at}")
        if self.length > at:
            held = min(count, self.length - at)
            self.cache.remove(at, held, self.length)
            self.length -= held
        self.gap_at, self.gap = at, self.gap + count

    def _rotary_through(self, positions: int) -> None:
        """Make the rotary tables reach ``positions``: the cache's capacity, or twice as far where a
        ``drop``'s gap numbers positions past it."""
        if positions > len(self.cos):
            count = self.cache.capacity if positions <= self.cache.capacity else 2 * positions
            self.cos, self.sin = self._rotary(torch.arange(count))

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin at ``positions``: rotate(x) = x cos + roll(x, half) sin. Made as far as
        ``_rotary_through`` asks and indexed by each pass (eight small ops a pass cost ~0.15 ms of a draft
        step)."""
        angles = torch.outer(positions.float(), self.inv_freq)[:, None, :]
        return torch.cat([angles, angles], dim=-1).cos(), torch.cat([-angles.sin(), angles.sin()], dim=-1)

    def limit_head(self, leading: int, always: Iterable[int] = ()) -> None:
        """Compute only the logits of ids below ``leading``, of ``always`` and of every id fed since the
        last reset: for a draft, whose steps then read a fraction of the head."""
        self.context_head = ContextHead(self.head, self.vocab, leading, always) if 0 < leading < self.vocab else None

    @property
    def supports_branches(self) -> bool:
        """Whether ``forward`` takes branches: where every layer is one call of the package's kernels."""
        return self.kernel_layers is not None

    @torch.inference_mode()
    def forward(self, ids: list[int], n_logits: int, branches: Sequence[tuple[int, int]] = ()) -> torch.Tensor:
        """Append ``ids``; logits after each of the last ``n_logits``, then one row after each branch.

        A branch ``(j, token)`` stands in for the j-th scored draft token, ``ids[-n_logits + 1 + j]``:
        it takes that token's position and sees only the tokens before it, so its row is what a single
        step after that prefix and the branch would compute, bit for bit. Its key and value are written
        past the cache's end and not kept.
        """
        rows, extra = len(ids), len(branches)
        if rows - n_logits > PROMPT_ROWS:
            # A long prompt goes in passes of at most PROMPT_ROWS rows, as even as they divide, each row
            # computed as in any pass, so the same numbers. Over a 1,500-token prompt of the default
            # pair (Zen 4), one pass held 0.26 GB of activations at its peak and took 8.5-9.1 s; passes
            # of 256 rows 0.07-0.09 GB and 7.5 s. (Passes of 128 rows made prompts of 140-250 tokens 5-10%
            # slower than one pass: each pass streams the weights again.)
            unscored = rows - n_logits
            passes = -(-unscored // PROMPT_ROWS)
            start = 0
            for i in range(passes):
                end = start + unscored // passes + (i < unscored % passes)
                self.forward(ids[start:end], 1)
                start = end
            return self.forward(ids[unscored:], n_logits, branches)
        if branches and rows > n_logits and rows + extra > MAX_ROWS:
            # A long unread prefix before the scored block (a prompt) goes first, on its own.
            self.forward(ids[: rows - n_logits], 1)
            return self.forward(ids[rows - n_logits :], n_logits, branches)
        fed = [*ids, *(token for _, token in branches)]
        if self.context_head is not None:
            self.context_head.see(fed)
        if self.length + rows + extra > self.cache.capacity:
            self._grow(self.length + rows + extra)
        stand_ins = [j for j, _ in branches]
        x = self.embedding.rows(torch.tensor(fed))
        indices = torch.arange(self.length, self.length + rows)
        visible = None
        if branches:
            if (self.kernel_layers is None or rows + extra > MAX_ROWS or len(set(branches)) < extra
                    or not 0 <= min(stand_ins) <= max(stand_ins) < n_logits - 1):
                raise ValueError(f"cannot verify branches {stand_ins} here (kernel layers, at most {MAX_ROWS} rows, "
                                 "each branch for a scored draft token, no branch twice)")
            # A branch takes the position of the token it stands in for, and sees the positions before it.
            # (A token or two before the scored block, such as the previous step's kept branch and the
            # target's token after it, share the pass: a pass of their own would stream the weights again.)
            scored_from = rows - n_logits + 1
            indices = visible = torch.cat([indices, indices[torch.tensor(stand_ins) + scored_from]])
        positions = indices + self.gap * (indices >= self.gap_at) if self.gap else indices
        self._rotary_through(self.length + rows + self.gap)
        cos, sin = self.cos[positions], self.sin[positions]
        if self.kernel_layers is not None and rows + extra <= MAX_ROWS:
            x = torch.ops.specdec.decoder_layers(x, cos, sin, self.cache.keys, self.cache.values, self.length,
                                                 *self.kernel_layers, visible)
        else:
            x = self.stack(x, cos, sin, self.cache.keys, self.cache.values, self.length, n_logits)
        self.length += rows
        self.cache.written = max(self.cache.written, self.length)
        head = self.head if self.context_head is None else self.context_head
        # The last n_logits rows fed, then the branches' (the kernel returns every row, the stack only those).
        return head(self.final_norm(x[len(x) - n_logits - extra :]))
