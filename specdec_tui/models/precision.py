"""Weight precisions for CPU inference, and the one place that touches quantized kernels.

The fast CPU paths are fbgemm kernels reached through ``torch.ops.quantized``; that front end is
deprecated, so everything that uses it lives here and each path falls back to a plain
``nn.Linear`` when the op is missing.

``int8`` is row-wise: every row of the activation is scaled by its own absolute maximum before the
kernel's per-tensor quantization, and two anchor columns (-1 and +1, against zero weights) pin the
kernel's range to [-1, 1] in every row. (An anchor row would do the same but costs the kernel a
whole extra row; two extra columns cost almost nothing.) Each row is then
quantized independently of the others and accumulated in exact integer arithmetic, so a verify
pass over M tokens computes bit-for-bit the numbers of M single steps. That is what lets the
target run in int8 without breaking the lossless guarantee. ``fp16`` (fbgemm fp16 weights) is
fast but its floating-point accumulation depends on M, like ``fp32``.

Where this package's own AVX2 kernels build (``quantized_kernels``), int8 uses them instead, for
targets and drafts alike: the same row-wise, exact-integer scheme, but each call streams the
weights once for all its rows. They also run ``int4`` (for drafts), which fbgemm cannot.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import torch
from torch import nn

from specdec_tui.models import quantized_kernels
from specdec_tui.models.memory import file_mapped, release_pages
from specdec_tui.models.q4k import Q4kParts, q4k_weight

Precision = Literal["fp32", "fp16", "bf16", "int8", "int4"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "int4")

#: Precisions whose verify pass over M tokens is computed exactly as M single steps (for a target).
BATCH_INVARIANT: frozenset[str] = frozenset({"int8", "int4"})

#: Precisions that pack weights for a CPU kernel (the others are plain dtypes).
PACKED: tuple[str, ...] = ("fp16", "int8", "int4")

PackProgress = Callable[[int, int], None]

#: Extra activation columns holding -1 and +1 that fix the int8 kernel's range (see the module doc).
ANCHOR_COLUMNS = 2

# The quantized front end announces its deprecation on every packing; this module is the one place
# that uses it, and knows. A process-wide filter, because packing runs in threads and
# ``warnings.catch_warnings`` is not thread-safe.
warnings.filterwarnings(
    "ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel", category=UserWarning
)


def _ops_available() -> bool:
    return hasattr(torch.ops.quantized, "linear_prepack_fp16") and hasattr(
        torch.ops.quantized, "linear_dynamic"
    )


class Fp16Linear(nn.Module):
    """Linear layer with fp16 weights packed for fbgemm; activations stay fp32."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.packed = torch.ops.quantized.linear_prepack_fp16(linear.weight.detach().float(), bias)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)


def with_leading_dims(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out`` (rows, features), computed from ``x`` flattened to rows, in ``x``'s leading shape."""
    shape = list(x.shape[:-1])
    shape.append(out.shape[-1])
    return out.reshape(shape)


def row_scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as rows scaled into [-1, 1], followed by the anchor columns; and each row's scale."""
    flat = x.reshape(-1, x.shape[-1])
    width = flat.shape[1]
    row_max = flat.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30)
    scaled = flat.new_empty(flat.shape[0], width + 2)  # the ANCHOR_COLUMNS (TorchScript reads no globals)
    torch.div(flat, row_max, out=scaled[:, :width])
    scaled[:, width] = -1.0
    scaled[:, width + 1] = 1.0
    return scaled, row_max


class _RowScaledInput:
    """Row-normalized activation shared by the linears that read the same tensor (q/k/v, gate/up)."""

    def __init__(self) -> None:
        self.source: torch.Tensor | None = None
        self.scaled: torch.Tensor | None = None
        self.row_max: torch.Tensor | None = None

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x is not self.source:
            self.source = x
            self.scaled, self.row_max = row_scaled(x)
        return self.scaled, self.row_max  # type: ignore[return-value]


def _packed_int8(linear: nn.Linear, with_bias: bool, anchor_columns: int = 0) -> object:
    """fbgemm-packed int8 weights, one scale per output channel, with zero weights for anchor columns."""
    weight = linear.weight.detach().float()
    if anchor_columns:
        weight = torch.cat([weight, weight.new_zeros(weight.shape[0], anchor_columns)], dim=1)
    scales = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0).double()
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
    bias = linear.bias.detach().float() if with_bias and linear.bias is not None else None
    return torch.ops.quantized.linear_prepack(qweight, bias)


class DynamicInt8Linear(nn.Module):
    """int8 weights, activations quantized per call over the whole tensor: fastest, not batch-invariant.

    A verify block's rows share one activation scale, so they differ from single steps; fine for a
    draft, whose numbers only decide what gets proposed.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.packed = _packed_int8(linear, with_bias=True)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)


class RowwiseInt8Linear(nn.Module):
    """int8 weights (per output channel), int8 activations scaled per row: batch-invariant."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.packed = _packed_int8(linear, with_bias=False, anchor_columns=ANCHOR_COLUMNS)
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled, row_max = row_scaled(x)
        return self.from_scaled(scaled, row_max, x)

    def from_scaled(self, scaled: torch.Tensor, row_max: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # reduce_range keeps activations to 7 bits, so the kernel's int16 pair sums never saturate.
        out = torch.ops.quantized.linear_dynamic(scaled, self.packed, True) * row_max
        if self.bias is not None:
            out = out + self.bias
        return with_leading_dims(out, x)


class SharedInputRowwiseInt8Linear(RowwiseInt8Linear):
    """A row-wise int8 linear whose siblings reading the same tensor scale it only once."""

    def __init__(self, linear: nn.Linear, shared_input: _RowScaledInput) -> None:
        super().__init__(linear)
        self.shared_input = shared_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled, row_max = self.shared_input.prepare(x)
        return self.from_scaled(scaled, row_max, x)


class PackedInt8Linear(nn.Module):
    """int8 weights, activations quantized per row, multiplied by ``quantized_kernels``: batch-invariant."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.packed, self.scales, self.column_sums = quantized_kernels.pack_int8(linear.weight)
        self.bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.ops.specdec.int8_linear(
            x.reshape(-1, x.shape[-1]), self.packed, self.scales, self.column_sums, self.bias, self.out_features
        )
        return with_leading_dims(out, x)


class IndexedInt8Linear(PackedInt8Linear):
    """int8 weights from a Q4_K tensor, held two ways: ``PackedInt8Linear``'s blocks and, in 0.625 of
    their bytes, 4-bit indices into each column's tables (``quantized_kernels.index_tables``). A call
    of a few rows reads the indices where the processor has AVX-512 VNNI, other calls the blocks; the
    numbers are the same either way. The tables round the weights as ``pack_int8`` does, to within
    1/16 of a step more. After ``drop_blocks`` every call reads the indices, until ``take_blocks_back``."""

    #: Dropped blocks that a mapped file still holds (``take_blocks_back`` reads them again), or None.
    released_blocks: torch.Tensor | None = None

    def __init__(self, linear: nn.Linear, parts: Q4kParts) -> None:
        nn.Module.__init__(self)
        indices, steps, offsets = parts
        a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
        expanded = quantized_kernels.expand_tables(indices, a, b)
        self.packed, self.scales, self.column_sums = quantized_kernels.int8_blocks(expanded, scales)
        self.records = quantized_kernels.pack_indexed_int8(indices, a, b)
        self.bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def drop_blocks(self) -> None:
        """Keep only the indices (with the scales and column sums both forms share): every call reads
        them, which needs AVX-512 VNNI, and the blocks' memory is not touched again. Blocks in a mapped
        file hand their pages back (``memory.release_pages``) and can be taken back; blocks packed in
        this process's memory are freed for good."""
        if self.packed.numel() and file_mapped(self.packed):
            release_pages(self.packed)
            self.released_blocks = self.packed
        self.packed = torch.empty(0, dtype=torch.int8)

    def take_blocks_back(self) -> int:
        """Read the released blocks again (the file pages them in as calls read them): calls of four rows
        or more go back to the blocks. Returns their bytes (0 where there are none to take back)."""
        if self.released_blocks is None:
            return 0
        self.packed, self.released_blocks = self.released_blocks, None
        return self.packed.numel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.ops.specdec.indexed_int8_linear(
            x.reshape(-1, x.shape[-1]), self.packed, self.scales, self.column_sums, self.records, self.bias,
            self.out_features,
        )
        return with_leading_dims(out, x)


class PackedInt4Linear(nn.Module):
    """4-bit weights with a scale and minimum per 64 inputs, 8-bit rows (``quantized_kernels``): for drafts.

    Half the bytes of int8, which is what a memory-bound draft step costs. Batch-invariant too.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.packed, self.scales, self.minimums = quantized_kernels.pack_int4(linear.weight)
        self.bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.ops.specdec.int4_linear(
            x.reshape(-1, x.shape[-1]), self.packed, self.scales, self.minimums, self.bias, self.out_features
        )
        return with_leading_dims(out, x)


#: The linear kinds a packed model file can hold, by name: each one's tensors, in order.
STORABLE: dict[str, tuple[type[nn.Module], tuple[str, ...]]] = {
    "int8": (PackedInt8Linear, ("packed", "scales", "column_sums")),
    "int8-indexed": (IndexedInt8Linear, ("packed", "scales", "column_sums", "records")),
    "int4": (PackedInt4Linear, ("packed", "scales", "minimums")),
    "fp32": (nn.Linear, ("weight",)),
}


def linear_tensors(module: nn.Module) -> tuple[str, dict[str, torch.Tensor]] | None:
    """``module``'s kind and the tensors ``linear_from_tensors`` makes it again from; None for a
    kind that cannot be stored (fbgemm's packed objects live only in memory)."""
    for kind, (cls, names) in STORABLE.items():
        if type(module) is cls:
            tensors = {name: getattr(module, name).detach() for name in names}
            if module.bias is not None:
                tensors["bias"] = module.bias.detach()
            return kind, tensors
    return None


def float_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    """An ``nn.Linear`` holding ``weight`` [out, in] and ``bias`` as they are, made without the random
    initialisation a new one pays for (a sixth of packing the default target from its GGUF went into it)."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        linear.bias = nn.Parameter(bias, requires_grad=False)
    return linear


def linear_from_tensors(kind: str, tensors: dict[str, torch.Tensor], in_features: int, out_features: int) -> nn.Module:
    """The linear that ``linear_tensors`` described, its tensors used as they are (memory-mapped, say)."""
    cls, names = STORABLE[kind]
    if cls is nn.Linear:
        return float_linear(tensors["weight"], tensors.get("bias"))
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    for name in names:
        setattr(module, name, tensors[name])
    module.bias = tensors.get("bias")
    module.in_features, module.out_features = in_features, out_features
    return module


def _as_linear(module: nn.Module) -> nn.Linear | None:
    """``module`` as an ``nn.Linear``: GPT-2 style ``Conv1D`` (weight stored transposed) is converted."""
    if type(module) is nn.Linear:
        return module
    from transformers.pytorch_utils import Conv1D  # only a transformers model has these
    if type(module) is Conv1D:
        return float_linear(module.weight.data.t().contiguous(), None if module.bias is None else module.bias.data)
    return None


def _linear_children(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            linear = _as_linear(child)
            if linear is not None:
                found.append((parent, name, linear))
    return found


def _in_parallel(make: Callable[[int], nn.Module], count: int, on_packed: PackProgress) -> list[nn.Module]:
    done = 0

    def one(index: int) -> nn.Module:
        nonlocal done
        module = make(index)
        done += 1
        on_packed(done, count)
        return module

    # Packing is single-threaded inside fbgemm and releases the GIL: threads cut start-up.
    with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
        return list(pool.map(one, range(count)))


def pack_linears(
    linears: Sequence[nn.Linear | Callable[[], nn.Linear]], precision: str, exact: bool, on_packed: PackProgress,
    q4k_sources: Sequence[Callable[[], Q4kParts | None]] = (),
) -> list[nn.Module]:
    """Each of ``linears`` converted to ``precision`` (each with its own int8 scaling).

    An item may be a function that makes the linear: then its fp32 weight (a fused one, say) exists
    only while it is packed, instead of all of them at once. ``q4k_sources[i]``, where given, reads
    the Q4_K tensor linear ``i`` was dequantized from (None if it was not one): at int8 with the
    package's kernels, such a linear is an ``IndexedInt8Linear`` if its weights are that tensor's.
    """
    def made(i: int) -> nn.Linear:
        item = linears[i]
        return item if isinstance(item, nn.Module) else item()

    def packed(i: int) -> nn.Module:
        linear = made(i)
        if precision == "int8" and i < len(q4k_sources) and quantized_kernels.available():
            parts = q4k_sources[i]()
            if parts is not None and torch.equal(q4k_weight(parts), linear.weight.detach().float()):
                return IndexedInt8Linear(linear, parts)
        return convert_linear(linear, precision, exact)

    if precision not in PACKED or not cpu_kernels_available(precision):
        return [made(i) for i in range(len(linears))]
    return _in_parallel(packed, len(linears), on_packed)


def _replace_linears(
    model: nn.Module, make: Callable[[nn.Module, nn.Linear], nn.Module], on_packed: PackProgress
) -> None:
    targets = _linear_children(model)
    packed = _in_parallel(lambda i: make(targets[i][0], targets[i][2]), len(targets), on_packed)
    for (parent, name, _), new in zip(targets, packed, strict=True):
        setattr(parent, name, new)


def convert_linear(
    linear: nn.Linear, precision: str, exact: bool = True, shared_input: _RowScaledInput | None = None
) -> nn.Module:
    """``linear`` at ``precision`` on the CPU.

    ``exact`` (a target) asks for int8 whose verify blocks equal single steps; a draft passes False
    and may get a faster kernel that is not. This package's kernel is both, and is used when it
    builds. Exact fbgemm siblings reading one tensor may share its scaling.
    """
    if precision == "fp16":
        return Fp16Linear(linear)
    if precision == "int4" and quantized_kernels.available():
        return PackedInt4Linear(linear)
    if precision == "int8" and quantized_kernels.available():
        return PackedInt8Linear(linear)
    if precision == "int4":
        precision = "int8"  # fbgemm has no 4-bit kernel; int8 is the nearest it runs
    if precision == "int8" and not exact:
        return DynamicInt8Linear(linear)
    if precision == "int8" and shared_input is not None:
        return SharedInputRowwiseInt8Linear(linear, shared_input)
    if precision == "int8":
        return RowwiseInt8Linear(linear)
    return linear


def cpu_kernels_available(precision: str) -> bool:
    """Whether ``precision`` has its fast CPU kernel here; if not it runs as fp32."""
    if precision in PACKED and not _ops_available():
        warnings.warn(f"quantized CPU kernels are missing; running {precision} as fp32", stacklevel=2)
        return False
    return True


def apply_precision(
    model: nn.Module,
    precision: str,
    device: torch.device,
    exact: bool = True,
    on_packed: PackProgress = lambda done, total: None,
) -> nn.Module:
    """Convert ``model`` in place to ``precision`` and return it; ``on_packed`` reports each layer."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if precision == "bf16":
        return model.to(torch.bfloat16)
    if device.type != "cpu":
        # On accelerators half precision is native; int8 here is a CPU kernel path.
        return model.to(torch.float16 if precision == "fp16" else torch.bfloat16)
    model.float()
    if precision == "fp32" or not cpu_kernels_available(precision):
        return model
    shared: dict[int, _RowScaledInput] = {}

    def make(parent: nn.Module, linear: nn.Linear) -> nn.Module:
        # One scaler per parent module: the siblings there (q/k/v, gate/up) read the same tensor.
        return convert_linear(linear, precision, exact, shared.setdefault(id(parent), _RowScaledInput()))

    _replace_linears(model, make, on_packed)
    return model
