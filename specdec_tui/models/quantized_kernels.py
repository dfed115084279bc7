"""This package's CPU kernels (``quantized_kernels.cpp``): built on first use, then cached.

``int8_linear`` multiplies row-wise quantized activations by int8 weights in exact integer
arithmetic (see the source's header), so it is batch-invariant like the fbgemm row-wise path, but
a verify block of up to five rows costs about what one row does: the weights stream once per call.
``int4_linear`` reads 4-bit weights with a scale and minimum per 64 inputs, half the bytes, for a
draft's memory-bound steps. ``rms_norm`` is the norm between them in one call instead of PyTorch's
ten small ops, and ``rotate_into_cache`` + ``attend_rows`` are a decode step's attention in two calls
instead of about twenty; each row of them is computed on its own, so they are batch-invariant too.

The integer products are built for AVX2, AVX-VNNI and AVX-512 VNNI in one library, and the fastest
set the processor runs is used (``instruction_sets()``); VNNI's ``vpdpbusd`` makes the same exact
sums in fewer instructions, and AVX-512's 32 registers let a pass over the weights take twelve rows
instead of five, so the same numbers come out on every host.

It is compiled with the system's C++ compiler against the installed torch and cached under the
user cache directory, keyed by the source, torch and compiler. Without a compiler or AVX2, or if
anything in the build fails, ``available()`` is False (with a one-line warning) and callers use
fbgemm's kernels and PyTorch's norm, attention and SwiGLU instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

import platformdirs
import torch

from specdec_tui.models.q4k import q4k_weight

T = TypeVar("T")

SOURCE = Path(__file__).with_name("quantized_kernels.cpp")
PRODUCTS_SOURCE = Path(__file__).with_name("quantized_products.inc")  # included by SOURCE
GGUF_SOURCE = Path(__file__).with_name("gguf_rows.cpp")  # built into the same library
INT8_COLUMNS = 16  # kBlockColumns in the source
INT8_GROUP = 4  # kGroup in the source
INT4_COLUMNS = 8  # kInt4Columns in the source
INT4_GROUP = 64  # kInt4Group in the source
INDEXED_COLUMNS = 4  # kTableColumns in the source
INDEXED_INPUTS = 32  # kTableInputs in the source
ATTENTION_HEAD_SIZES = (16, 32, 64, 128)  # the head sizes attend_rows is compiled for
BUILD_SECONDS = 300

_lock = threading.Lock()
_state: dict[str, bool] = {}


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


def _flags() -> list[str]:
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    # -ffp-contract=off: GCC would otherwise fuse a multiply and an add where it likes, and did so
    # in one row of a block but not in a lone row (a verify block then differed from single steps).
    return [
        "-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-L{torch_dir / 'lib'}", "-ltorch", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}",
    ]


def _library_path() -> Path:
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), PRODUCTS_SOURCE.read_bytes(), GGUF_SOURCE.read_bytes(), torch.__version__.encode(),
                 sys.version.encode(),
                 _compiler().encode(), " ".join(_flags()).encode()):
        key.update(part)
    return Path(platformdirs.user_cache_dir("specdec-tui")) / "kernels" / key.hexdigest()[:16] / "quantized_kernels.so"


def _build(target: Path) -> None:
    if shutil.which(_compiler()) is None:
        raise RuntimeError(f"no C++ compiler ({_compiler()}) on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        result = subprocess.run(
            [_compiler(), str(SOURCE), str(GGUF_SOURCE), "-o", str(built), *_flags()],
            capture_output=True, text=True, timeout=BUILD_SECONDS, check=False,
        )
        if result.returncode != 0:
            first = next((line for line in result.stderr.splitlines() if "error" in line), result.stderr.strip())
            raise RuntimeError(f"the build failed (exit status {result.returncode}): {first[:200]}")
        os.replace(built, target)  # atomic: a concurrent build leaves one whole file


def _load() -> None:
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        raise RuntimeError("this CPU has no AVX2")
    library = _library_path()
    if not library.exists():
        try:
            _build(library)
        except RuntimeError:
            # Seen once on a loaded machine: the compiler ended without a message. A second try is
            # cheap next to running every model without the kernels.
            _build(library)
    try:
        torch.ops.load_library(str(library))
    except OSError:
        # A cached file that does not load (truncated, say) is rebuilt once, not trusted.
        library.unlink()
        _build(library)
        torch.ops.load_library(str(library))


def available() -> bool:
    """Whether ``torch.ops.specdec``'s kernels are loaded; builds them the first time it is asked."""
    with _lock:
        if "loaded" not in _state:
            try:
                _load()
                _state["loaded"] = True
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                warnings.warn(f"int8/int4 kernels unavailable, using fbgemm int8 instead: {exc}", stacklevel=2)
                _state["loaded"] = False
        return _state["loaded"]


def instruction_sets() -> list[str]:
    """The instruction sets this processor runs the int8 and int4 products with, fastest first
    (``avx512_vnni``, ``avx_vnni``, ``avx2``); empty without the kernels. All give the same numbers."""
    return list(torch.ops.specdec.instruction_sets()) if available() else []


def instruction_set() -> str | None:
    """The instruction set the products use now: the fastest this processor runs unless changed."""
    return str(torch.ops.specdec.instruction_set()) if available() else None


@contextmanager
def using_instruction_set(name: str) -> Iterator[None]:
    """Runs the products with ``name`` inside the block; a one-line RuntimeError if this processor can't."""
    if name not in instruction_sets():
        raise RuntimeError(f"this processor cannot run the kernels' {name!r} products "
                           f"(it runs {', '.join(instruction_sets()) or 'none'})")
    previous = instruction_set()
    torch.ops.specdec.use_instruction_set(name)
    try:
        yield
    finally:
        torch.ops.specdec.use_instruction_set(previous)


@contextmanager
def _kernel_setting(op: str, value: T) -> Iterator[T]:
    """``torch.ops.specdec.<op>(value)`` inside the block, then the setting it returned as the one
    before; ``with ... as previous`` gives that returned setting."""
    if not available():  # which also loads the library, and with it the op
        raise RuntimeError("the package's kernels are not loaded here")
    use: Callable[[T], T] = getattr(torch.ops.specdec, op)
    previous = use(value)
    try:
        yield previous
    finally:
        use(previous)


#: A value each kernel setting accepts, set for a moment to read the setting.
_SETTING_PROBES: dict[str, bool | int] = {"use_wide_passes": True, "use_wide_passes_from": 1,
                                          "use_wide_int4_passes_from": 1, "use_short_pass_prefetch": -1,
                                          "use_indexed_int8_up_to": 0}


def kernel_setting(op: str) -> bool | int:
    """The value of the kernel setting ``torch.ops.specdec.<op>`` now (``use_wide_passes``,
    ``use_wide_passes_from``, ``use_wide_int4_passes_from``, ``use_short_pass_prefetch`` or
    ``use_indexed_int8_up_to``; for tests and measurements). The ops only set, returning the value
    before, so this sets a valid value and gives the returned one back."""
    if op not in _SETTING_PROBES:
        raise ValueError(f"no kernel setting {op!r} (settings: {', '.join(_SETTING_PROBES)})")
    with _kernel_setting(op, _SETTING_PROBES[op]) as current:
        return current


def using_wide_passes(on: bool) -> AbstractContextManager[bool]:
    """Inside the block, calls of many rows (a prompt) take AVX-512 VNNI's 512-bit passes or not;
    the numbers are the same either way (for tests and measurements)."""
    return _kernel_setting("use_wide_passes", on)


def using_wide_passes_from(rows: int) -> AbstractContextManager[int]:
    """Inside the block, int8 calls of at least ``rows`` rows take AVX-512 VNNI's 512-bit passes (by
    default every call on an Intel processor, which runs them whole, and calls of 32 rows elsewhere);
    the numbers are the same either way (for tests and measurements)."""
    return _kernel_setting("use_wide_passes_from", rows)


def using_wide_int4_passes_from(rows: int) -> AbstractContextManager[int]:
    """Inside the block, int4 calls of at least ``rows`` rows take AVX-512 VNNI's 512-bit passes (by
    default every call of six rows or more); the numbers are the same either way (for tests and
    measurements)."""
    return _kernel_setting("use_wide_int4_passes_from", rows)


def using_indexed_int8_up_to(rows: int) -> AbstractContextManager[int]:
    """Inside the block, an indexed int8 linear's calls of at most ``rows`` rows read its indices where
    the chosen instruction set is AVX-512 VNNI (by default calls of up to three rows), the others its
    int8 blocks; 0: every call the blocks. The numbers are the same either way (for tests and
    measurements)."""
    return _kernel_setting("use_indexed_int8_up_to", rows)


def reads_indices() -> bool:
    """Whether the chosen instruction set reads an indexed int8 linear's indices (AVX-512 VNNI)."""
    return instruction_set() == "avx512_vnni"


def using_short_pass_prefetch(on: bool | None) -> AbstractContextManager[int]:
    """Inside the block, passes of one or two rows fetch their weights ahead in software as longer
    ones do (``True``), fetch less (``False``: a lone int8 row nothing, two rows and a lone int4 row
    only the near lines), or do as the instruction set chooses (``None``, the default: less on
    AVX2); the numbers are the same either way (for tests and measurements). Int8 calls that take
    the wide passes (every one on an Intel processor with AVX-512 VNNI) fetch far ahead regardless."""
    return _kernel_setting("use_short_pass_prefetch", -1 if on is None else int(on))


PACK_ROWS_AT_ONCE = 8192


def pack_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``weight`` [N, K] as the kernel reads it: int8 blocks, per-column scales and column sums.

    Each output column (a row of ``weight``) gets its own scale, absolute maximum / 127. Columns
    are padded to a multiple of 16 and inputs to a multiple of 4 with zero weights.
    """
    weight = weight.detach()
    q = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(weight.shape[0])
    # A slice of columns at a time: a head's float temporaries would be twice its 0.9 GB otherwise.
    # (Every step is per column, so the bits are the same.)
    for start in range(0, weight.shape[0], PACK_ROWS_AT_ONCE):
        rows = weight[start : start + PACK_ROWS_AT_ONCE].float()
        row_scales = rows.abs().amax(dim=1).clamp_min(1e-12) / 127.0
        scales[start : start + PACK_ROWS_AT_ONCE] = row_scales
        q[start : start + PACK_ROWS_AT_ONCE] = torch.round(rows / row_scales[:, None]).clamp_(-127, 127)
    return int8_blocks(q, scales)


def int8_blocks(q: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Int8 weights ``q`` [N, K] with their column scales [N] as ``pack_int8`` returns them."""
    out_features, in_features = q.shape
    columns = -(-out_features // INT8_COLUMNS) * INT8_COLUMNS
    width = -(-in_features // INT8_GROUP) * INT8_GROUP
    padded = torch.zeros(columns, width, dtype=torch.int8)
    padded[:out_features, :in_features] = q
    blocks = padded.view(columns // INT8_COLUMNS, INT8_COLUMNS, width // INT8_GROUP, INT8_GROUP).transpose(1, 2).contiguous()
    column_scales = torch.ones(columns)
    column_scales[:out_features] = scales
    column_sums = padded.sum(dim=1, dtype=torch.int32)
    return blocks, column_scales, column_sums


def index_tables(indices: torch.Tensor, steps: torch.Tensor, offsets: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]:
    """Int8 tables for weights ``steps * indices - offsets`` (a Q4_K tensor's: ``indices`` [N, K] in
    [0, 15], ``steps`` and ``offsets`` [N, K / 32] float32, one per column and 32 inputs).

    Returns each table's A and B (int16, [N, K / 32]; the table is ``expand_tables``'s) and the
    column scales [N]. A column's scale is its float weights' absolute maximum / 127, as
    ``pack_int8``'s, and its tables round the weights over that scale as ``pack_int8`` does, to
    within 1/16 of a step more (A's rounding, times up to 15).

    The kernel computes a table in int16 lanes, exact modulo 2^16: for every index a column uses,
    ``A q + B`` is about 128 times a weight over its scale, within 128 x 127.6, so it fits and the
    kernel's table entry is ``expand_tables``'s. An entry no index uses may wrap, and is never read."""
    rows, width = indices.shape
    if width % INDEXED_INPUTS or steps.shape != (rows, width // INDEXED_INPUTS) or offsets.shape != steps.shape:
        raise ValueError(f"index_tables: {tuple(indices.shape)} indices need a step and an offset per 32 inputs")
    weight = q4k_weight((indices, steps, offsets))
    scales = weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    # T[q] = floor((A q + B) / 128) = round(A / 128 q + (B - 64) / 128), A / 128 ~ step / scale
    a = torch.round(steps.double() * 128 / scales.double()[:, None])
    b = torch.round(-offsets.double() * 128 / scales.double()[:, None]) + 64
    return a.to(torch.int16), b.to(torch.int16), scales


def expand_tables(indices: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The int8 weights [N, K] that ``indices`` pick from the tables ``(a q + b) >> 7`` (saturated).

    In int16, as the kernel computes a table: exact for every index a column uses (``index_tables``)."""
    rows, width = indices.shape
    picked = indices.view(rows, width // INDEXED_INPUTS, INDEXED_INPUTS).to(torch.int16)
    weights = torch.bitwise_right_shift(picked * a.to(torch.int16)[..., None] + b.to(torch.int16)[..., None], 7)
    return weights.clamp_(-128, 127).to(torch.int8).view(rows, width)


def pack_indexed_int8(indices: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``index_tables``'s weights as ``indexed_int8_linear`` reads them: records [N/4, K/32, 80] (per
    4 columns and 32 inputs, the indices, then A and B of each column), columns padded to a multiple
    of 4 with zero tables. The op takes the column scales and sums of ``int8_blocks`` for the same
    expanded weights."""
    rows, width = indices.shape
    columns = -(-rows // INDEXED_COLUMNS) * INDEXED_COLUMNS
    steps = width // INDEXED_INPUTS

    def padded(values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((columns, *values.shape[1:]), dtype=values.dtype)
        out[:rows] = values
        return out

    q = padded(indices.to(torch.uint8)).view(columns // INDEXED_COLUMNS, INDEXED_COLUMNS, steps, 2, 16)
    q = q.permute(0, 2, 1, 3, 4)
    nibbles = (q[..., 0, :] | (q[..., 1, :] << 4)).reshape(columns // INDEXED_COLUMNS, steps, 64)

    def per_record(values: torch.Tensor) -> torch.Tensor:
        blocked = padded(values).view(columns // INDEXED_COLUMNS, INDEXED_COLUMNS, steps).transpose(1, 2)
        return blocked.contiguous().view(torch.uint8)

    return torch.cat([nibbles, per_record(a), per_record(b)], dim=2).contiguous()


def pack_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``weight`` [N, K] as 4-bit values with a float16 scale and minimum per 64 inputs of a column.

    Returns the packed nibbles, scales and minimums in the kernel's block order. Each value is
    ``scale * q + minimum`` with q in [0, 15], rounded against the float16 scale and minimum the
    kernel reads.
    """
    out_features, in_features = weight.shape
    columns = -(-out_features // INT4_COLUMNS) * INT4_COLUMNS
    width = -(-in_features // INT4_GROUP) * INT4_GROUP
    q = torch.empty(columns, width // INT4_GROUP, INT4_GROUP, dtype=torch.uint8)
    minimum, scale = torch.empty(columns, width // INT4_GROUP), torch.empty(columns, width // INT4_GROUP)
    # A slice of columns at a time, as pack_int8 does.
    for start in range(0, columns, PACK_ROWS_AT_ONCE):
        end = min(start + PACK_ROWS_AT_ONCE, columns)
        padded = torch.zeros(end - start, width)
        padded[: max(0, min(end, out_features) - start), :in_features] = weight[start:end].detach().float()
        groups = padded.view(end - start, width // INT4_GROUP, INT4_GROUP)
        minimum[start:end] = groups.amin(dim=2).half().float()
        scale[start:end] = ((groups.amax(dim=2) - minimum[start:end]) / 15.0).clamp_min(1e-8).half().float()
        q[start:end] = torch.round((groups - minimum[start:end, :, None]) / scale[start:end, :, None]).clamp_(0, 15)
    # k = group * 64 + step * 8 + nibble * 4 + i  ->  [block, group, step, column, i, nibble]
    q = q.view(columns // INT4_COLUMNS, INT4_COLUMNS, width // INT4_GROUP, 8, 2, 4).permute(0, 2, 3, 1, 5, 4)
    packed = (q[..., 0] | (q[..., 1] << 4)).contiguous()

    def block_order(values: torch.Tensor) -> torch.Tensor:
        blocked = values.view(columns // INT4_COLUMNS, INT4_COLUMNS, -1).transpose(1, 2)
        return blocked.half().contiguous().view(torch.int16)

    return packed, block_order(scale), block_order(minimum)
