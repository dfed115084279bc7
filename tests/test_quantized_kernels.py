"""The package's own kernels (int8, int4, RMS norm, attention): exact products, batch-invariant rows, a fallback."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from specdec_tui.models import quantized_kernels
from specdec_tui.models.layers import (
    Attention,
    KernelAttention,
    KernelRmsNorm,
    KernelSwiGlu,
    RmsNorm,
    SwiGlu,
    attention,
    swiglu,
)
from specdec_tui.models.precision import (
    DynamicInt8Linear,
    PackedInt4Linear,
    PackedInt8Linear,
    RowwiseInt8Linear,
    convert_linear,
)

needs_kernels = pytest.mark.skipif(not quantized_kernels.available(), reason="the package's kernels do not build here")


def levels_over_peak(levels: float, peak: torch.Tensor) -> torch.Tensor:
    """levels / peak divided as the kernel divides; torch's ``levels / peak`` multiplies by the
    reciprocal, one rounding more, and on rare rows rounds an input the other way."""
    return torch.where(peak > 0, torch.full_like(peak, levels) / peak, 0.0)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """What the kernel promises, in plain integer arithmetic: 7-bit rows times 8-bit columns."""
    scales = weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    q_weight = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int64)
    peak = x.abs().amax(dim=1, keepdim=True)
    q_x = torch.round(x * levels_over_peak(63.0, peak)).to(torch.int64)
    exact = (q_x @ q_weight.t()).float()
    out = exact * (scales * (peak / 63.0))
    return out if bias is None else out + bias


def int4_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """What the int4 kernel promises: 8-bit rows times 4-bit weights with a float16 scale and
    minimum per 64 inputs, summed exactly."""
    out_features, in_features = weight.shape
    width = -(-in_features // 64) * 64
    groups = torch.nn.functional.pad(weight, (0, width - in_features)).view(out_features, -1, 64)
    minimum = groups.amin(dim=2).half().float()
    scale = ((groups.amax(dim=2) - minimum) / 15).clamp_min(1e-8).half().float()
    q = torch.round((groups - minimum[..., None]) / scale[..., None]).clamp(0, 15)
    dequantized = (q * scale[..., None] + minimum[..., None]).view(out_features, width)[:, :in_features]
    peak = x.abs().amax(dim=1, keepdim=True)
    q_x = torch.round(x * levels_over_peak(127.0, peak))
    out = (q_x.double() @ dequantized.double().t()).float() * (peak / 127.0)
    return out if bias is None else out + bias


def linear(out_features: int, in_features: int, bias: bool, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features, bias=bias)
    layer.weight.data.normal_(0, 0.05)
    return layer


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 12), in_features=st.integers(1, 70), out_features=st.integers(1, 40),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_the_int8_kernel_computes_the_integer_products_of_the_quantized_rows(
    rows: int, in_features: int, out_features: int, bias: bool, seed: int
):
    layer = linear(out_features, in_features, bias, seed)
    x = torch.randn(rows, in_features) * 3
    expected = reference(x, layer.weight.detach(), None if layer.bias is None else layer.bias.detach())
    assert torch.allclose(PackedInt8Linear(layer)(x), expected, rtol=1e-6, atol=1e-6)


@needs_kernels
@settings(max_examples=30, deadline=None)
@given(rows=st.integers(2, 11), width=st.sampled_from([16, 63, 130]), seed=st.integers(0, 2**16))
def test_an_int8_block_of_rows_is_bit_for_bit_those_rows_one_at_a_time(rows: int, width: int, seed: int):
    layer = PackedInt8Linear(linear(37, width, True, seed))
    x = torch.randn(rows, width)
    assert torch.equal(layer(x), torch.cat([layer(x[i : i + 1]) for i in range(rows)]))


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 8), in_features=st.integers(1, 200), out_features=st.integers(1, 30),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_the_int4_kernel_computes_the_products_of_the_dequantized_weights(
    rows: int, in_features: int, out_features: int, bias: bool, seed: int
):
    layer = linear(out_features, in_features, bias, seed)
    x = torch.randn(rows, in_features) * 3
    expected = int4_reference(x, layer.weight.detach(), None if layer.bias is None else layer.bias.detach())
    got = PackedInt4Linear(layer)(x)
    # The kernel sums per 64 inputs, then in float: equal up to float rounding of those sums.
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    single = torch.cat([PackedInt4Linear(layer)(x[i : i + 1]) for i in range(rows)])
    assert torch.equal(got, single)


@needs_kernels
@pytest.mark.parametrize("pack", [quantized_kernels.pack_int8, quantized_kernels.pack_int4])
def test_packing_a_slice_of_columns_at_a_time_gives_the_bits_of_packing_them_at_once(
        monkeypatch: pytest.MonkeyPatch, pack):
    weight = torch.randn(101, 192, generator=torch.Generator().manual_seed(3))  # columns and inputs padded
    monkeypatch.setattr(quantized_kernels, "PACK_ROWS_AT_ONCE", 10**9)
    at_once = pack(weight)
    monkeypatch.setattr(quantized_kernels, "PACK_ROWS_AT_ONCE", 24)  # five slices, the last short and padded
    for whole, sliced in zip(at_once, pack(weight), strict=True):
        assert whole.dtype == sliced.dtype and torch.equal(whole, sliced)


def test_a_row_of_zeros_gives_the_bias():
    layer = linear(20, 8, True, 0)
    assert torch.equal(PackedInt8Linear(layer)(torch.zeros(2, 8)), layer.bias.detach().expand(2, 20))


@needs_kernels
def test_leading_dimensions_are_kept():
    layer = PackedInt8Linear(linear(24, 32, False, 1))
    x = torch.randn(2, 3, 32)
    assert torch.equal(layer(x), layer(x.reshape(6, 32)).reshape(2, 3, 24))


@needs_kernels
def test_int8_layers_use_the_kernel_for_targets_and_drafts_and_int4_its_4_bit_kernel():
    layer = linear(16, 16, False, 2)
    assert isinstance(convert_linear(layer, "int8", exact=True), PackedInt8Linear)
    assert isinstance(convert_linear(layer, "int8", exact=False), PackedInt8Linear)
    assert isinstance(convert_linear(layer, "int4", exact=False), PackedInt4Linear)


#: Each instruction set of the products and the /proc/cpuinfo flags it needs.
INSTRUCTION_SETS = {"avx512_vnni": {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}, "avx_vnni": {"avx_vnni"},
                    "avx2": {"avx2", "fma"}}


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")))


@needs_kernels
def test_the_products_use_the_fastest_instruction_set_the_processor_has():
    runnable = [name for name, flags in INSTRUCTION_SETS.items() if flags <= cpu_flags()]
    assert quantized_kernels.instruction_sets() == runnable
    assert quantized_kernels.instruction_set() == runnable[0]


@needs_kernels
def test_an_instruction_set_the_processor_lacks_is_refused_in_one_line_and_changes_nothing():
    fastest = quantized_kernels.instruction_set()
    with (pytest.raises(RuntimeError, match="^this processor cannot run the kernels' 'sse4' products \\(it runs avx"),
          quantized_kernels.using_instruction_set("sse4")):
        pass
    with pytest.raises(RuntimeError, match="no instruction set named sse4"):
        torch.ops.specdec.use_instruction_set("sse4")
    for name in INSTRUCTION_SETS.keys() - set(quantized_kernels.instruction_sets()):
        with pytest.raises(RuntimeError, match=f"this processor cannot run {name}"):
            torch.ops.specdec.use_instruction_set(name)
    assert quantized_kernels.instruction_set() == fastest


@pytest.fixture(params=list(INSTRUCTION_SETS))
def instruction_set_here(request: pytest.FixtureRequest) -> str:
    """Each instruction set of the kernels' products, skipped where this processor cannot run it."""
    if request.param not in quantized_kernels.instruction_sets():
        pytest.skip(f"this processor has no {request.param}")
    return request.param


@needs_kernels
def test_wide_passes_come_back_as_they_were_after_a_block_that_set_them():
    assert quantized_kernels.kernel_setting("use_wide_passes")  # on by default
    with quantized_kernels.using_wide_passes(False):
        assert not quantized_kernels.kernel_setting("use_wide_passes")
        with quantized_kernels.using_wide_passes(True):
            assert quantized_kernels.kernel_setting("use_wide_passes")
        assert not quantized_kernels.kernel_setting("use_wide_passes")  # the inner block gave back the outer one's setting
    assert quantized_kernels.kernel_setting("use_wide_passes")


@needs_kernels
def test_reading_a_kernel_setting_leaves_it_as_it_was():
    with quantized_kernels.using_wide_passes_from(7), quantized_kernels.using_short_pass_prefetch(False):
        for _ in range(2):
            assert quantized_kernels.kernel_setting("use_wide_passes_from") == 7
            assert quantized_kernels.kernel_setting("use_short_pass_prefetch") == 0
    with pytest.raises(ValueError, match="no kernel setting 'use_wide'"):
        quantized_kernels.kernel_setting("use_wide")


# Per kind: the layer (three blocks, the last paired with itself), the threshold's setting, its
# context manager, and another threshold to read back and decode under.
WIDE_THRESHOLDS = {
    "int8": (lambda: PackedInt8Linear(linear(45, 700, True, 8)), "use_wide_passes_from",
             quantized_kernels.using_wide_passes_from, 32),
    "int4": (lambda: PackedInt4Linear(linear(21, 200, True, 9)), "use_wide_int4_passes_from",
             quantized_kernels.using_wide_int4_passes_from, 2),
}


@needs_kernels
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_calls_of_a_few_rows_on_the_wide_passes_give_the_same_bits_as_on_the_narrow_ones(kind: str):
    if "avx512_vnni" not in quantized_kernels.instruction_sets():
        pytest.skip("this processor has no avx512_vnni")
    make_layer, setting, using_threshold, other = WIDE_THRESHOLDS[kind]
    torch.manual_seed(12)
    layer = make_layer()
    x = torch.randn(13, layer.in_features) * 3
    # int8: 1 on Intel processors, 32 elsewhere; int4: 6 everywhere.
    default = quantized_kernels.kernel_setting(setting)
    if kind == "int4":
        assert default == 6
    with quantized_kernels.using_instruction_set("avx512_vnni"):
        with quantized_kernels.using_wide_passes(False):
            narrow = [layer(x[:rows]) for rows in range(1, 14)]
        with using_threshold(1):
            wide = [layer(x[:rows]) for rows in range(1, 14)]  # one pass each up to 12 rows, then two
            assert quantized_kernels.kernel_setting(setting) == 1
        with using_threshold(other):
            assert quantized_kernels.kernel_setting(setting) == other
            from_other = [layer(x[:rows]) for rows in range(1, 14)]
    assert quantized_kernels.kernel_setting(setting) == default
    for rows, (expected, got, also) in enumerate(zip(narrow, wide, from_other, strict=True), start=1):
        assert torch.equal(got, expected), rows
        assert torch.equal(also, expected), rows
    with pytest.raises(RuntimeError, match=f"{setting}: at least 1 row, not 0"):
        getattr(torch.ops.specdec, setting)(0)


@needs_kernels
def test_short_passes_give_the_same_bits_whether_or_not_they_fetch_ahead(instruction_set_here: str):
    name = instruction_set_here
    torch.manual_seed(11)
    for kind, layer in (("int8", PackedInt8Linear(linear(45, 700, True, 8))),
                        ("int4", PackedInt4Linear(linear(21, 700, True, 9)))):
        for rows in (1, 2):
            x = torch.randn(rows, layer.in_features) * 3
            with quantized_kernels.using_instruction_set(name):
                chosen = layer(x)
                with quantized_kernels.using_short_pass_prefetch(True):
                    fetching = layer(x)
                    with quantized_kernels.using_short_pass_prefetch(False):
                        not_fetching = layer(x)
                    assert quantized_kernels.kernel_setting("use_short_pass_prefetch") == 1  # the inner block gave back the outer one's setting
            assert torch.equal(fetching, chosen), (kind, rows)
            assert torch.equal(not_fetching, chosen), (kind, rows)
    assert quantized_kernels.kernel_setting("use_short_pass_prefetch") == -1  # every block gave back the one before it
    with pytest.raises(RuntimeError, match="use_short_pass_prefetch: -1, 0 or 1, not 2"):
        torch.ops.specdec.use_short_pass_prefetch(2)


@needs_kernels
def test_every_instruction_set_gives_the_avx2_numbers_bit_for_bit_and_blocks_equal_single_rows(instruction_set_here: str):
    name = instruction_set_here
    torch.manual_seed(7)
    for kind, layer in (("int8", PackedInt8Linear(linear(45, 130, True, 8))),
                        ("int4", PackedInt4Linear(linear(21, 200, True, 9)))):
        # 60 rows: more than any set's pass (12 at most), so calls of many rows take AVX-512's wide passes
        # (two blocks at a time, the third paired with itself).
        x = torch.randn(60, layer.in_features) * 3
        with quantized_kernels.using_instruction_set("avx2"):
            expected = layer(x)
        with quantized_kernels.using_instruction_set(name):
            assert quantized_kernels.instruction_set() == name
            blocks = [layer(x[:rows]) for rows in range(1, 61)]
            single = torch.cat([layer(x[i : i + 1]) for i in range(60)])
            with quantized_kernels.using_wide_passes(False):
                narrow = layer(x)
        assert torch.equal(narrow, expected), kind
        for rows, block in enumerate(blocks, start=1):
            assert torch.equal(block, expected[:rows]), (kind, rows)
        assert torch.equal(single, expected), kind
    assert quantized_kernels.instruction_set() == quantized_kernels.instruction_sets()[0]


def test_without_a_compiler_int8_falls_back_to_fbgemm_with_one_warning(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setattr(quantized_kernels, "_state", {})
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(quantized_kernels.platformdirs, "user_cache_dir", lambda app: str(tmp_path / "cache"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        converted = convert_linear(linear(16, 16, False, 3), "int8", exact=True)
        convert_linear(linear(16, 16, False, 4), "int8", exact=True)
        draft = convert_linear(linear(16, 16, False, 5), "int4", exact=False)
    assert isinstance(converted, RowwiseInt8Linear)
    assert isinstance(draft, DynamicInt8Linear)  # int4 falls back to fbgemm's int8
    messages = [str(w.message) for w in caught if "kernels unavailable" in str(w.message)]
    assert messages == [f"int8/int4 kernels unavailable, using fbgemm int8 instead: no C++ compiler ({tmp_path / 'no-such-compiler'}) on PATH"]


@needs_kernels
def test_a_cached_kernel_that_does_not_load_is_rebuilt(tmp_path):
    # In a fresh process: this one has already registered the kernels, which cannot happen twice.
    script = textwrap.dedent("""
        from specdec_tui.models import quantized_kernels
        library = quantized_kernels._library_path()
        library.parent.mkdir(parents=True)
        library.write_bytes(b"not a shared library")
        assert quantized_kernels.available()
        assert library.read_bytes()[:4] == b"\\x7fELF"
        print("rebuilt")
    """)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=600)
    assert done.stdout.strip() == "rebuilt", done.stderr[-2000:]


@needs_kernels
@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(1, 100), seed=st.integers(0, 2**16))
def test_the_kernel_rms_norm_is_pytorchs_to_rounding_and_the_same_for_any_number_of_rows(
    rows: int, width: int, seed: int
):
    torch.manual_seed(seed)
    x, weight = torch.randn(rows, width) * 4, torch.randn(width)
    norm = KernelRmsNorm(weight, 1e-6)
    out = norm(x)
    assert torch.allclose(out, RmsNorm(weight, 1e-6)(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(out, torch.cat([norm(x[i : i + 1]) for i in range(rows)]))


def attention_inputs(rows: int, heads: int, kv_heads: int, dim: int, length: int, seed: int,
                     dtype: torch.dtype = torch.float32):
    torch.manual_seed(seed)
    projected = torch.randn(rows, (heads + 2 * kv_heads) * dim) * 3
    angles = torch.rand(rows, 1, dim // 2) * 6
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([-angles.sin(), angles.sin()], -1)
    cache = [(torch.randn(kv_heads, length + rows + 3, dim) * 3).to(dtype) for _ in range(2)]
    return projected, cos, sin, cache


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 6), kv_heads=st.integers(1, 3), groups=st.integers(1, 3), dim=st.sampled_from(quantized_kernels.ATTENTION_HEAD_SIZES),
       length=st.integers(0, 150), seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float32, torch.float16]))
def test_the_kernel_attention_is_pytorchs_to_rounding_and_fills_the_same_cache(
    rows: int, kv_heads: int, groups: int, dim: int, length: int, seed: int, dtype: torch.dtype
):
    projected, cos, sin, cache = attention_inputs(rows, kv_heads * groups, kv_heads, dim, length, seed, dtype)
    kernel_cache, torch_cache = [c.clone() for c in cache], [c.clone() for c in cache]
    out = KernelAttention(kv_heads * groups, kv_heads, dim)(projected, cos, sin, *kernel_cache, length)
    expected = Attention(kv_heads * groups, kv_heads, dim)(projected, cos, sin, *torch_cache, length)
    assert torch.allclose(out, expected, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(kernel_cache, torch_cache, strict=True):
        assert mine.dtype == dtype and torch.allclose(mine.float(), theirs.float(), rtol=1e-5, atol=1e-5)


@needs_kernels
@settings(max_examples=30, deadline=None)
@given(rows=st.integers(2, 6), length=st.integers(0, 150), shape=st.sampled_from([(4, 2, 16), (6, 1, 64)]),
       seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float16, torch.float32]))
def test_an_attention_block_of_rows_is_bit_for_bit_those_rows_one_at_a_time(
    rows: int, length: int, shape: tuple[int, int, int], seed: int, dtype: torch.dtype
):
    # Past 64 keys the values are summed in blocks; a single row of a lone key/value head splits
    # its query heads between threads, a block of rows does not.
    heads, kv_heads, dim = shape
    projected, cos, sin, cache = attention_inputs(rows, heads, kv_heads, dim, length, seed, dtype)
    layer = KernelAttention(heads, kv_heads, dim)
    block_cache, single_cache = [c.clone() for c in cache], [c.clone() for c in cache]
    block = layer(projected, cos, sin, *block_cache, length)
    singles = torch.cat([layer(projected[i : i + 1], cos[i : i + 1], sin[i : i + 1], *single_cache, length + i)
                         for i in range(rows)])
    assert torch.equal(block, singles)
    assert all(torch.equal(a, b) for a, b in zip(block_cache, single_cache, strict=True))


@needs_kernels
def test_every_instruction_set_gives_the_avx2_attention_bit_for_bit(instruction_set_here: str):
    # AVX-512 holds a key's even and odd chunks in one register and sums the weighted values sixteen
    # lanes at a time: each lane must still add its terms in the 256-bit loops' order, for rows and for
    # branches (a row that sees fewer positions, then its own).
    for dim in quantized_kernels.ATTENTION_HEAD_SIZES:
        for length in (0, 5, 64, 130):
            for rows in (1, 5):
                torch.manual_seed(dim + length + rows)
                q = torch.randn(rows, 6, dim)
                keys, values = torch.randn(2, length + rows + 2, dim) * 3, torch.randn(2, length + rows + 2, dim) * 3
                visible = torch.tensor([length + m - (m % 2) for m in range(rows)])
                for seen, dtype in itertools.product((None, visible), (torch.float32, torch.float16)):
                    cache = keys.to(dtype), values.to(dtype)
                    with quantized_kernels.using_instruction_set("avx2"):
                        expected = torch.ops.specdec.attend_rows(q, *cache, length, seen)
                    with quantized_kernels.using_instruction_set(instruction_set_here):
                        out = torch.ops.specdec.attend_rows(q, *cache, length, seen)
                    assert torch.equal(out, expected), (dim, length, rows, seen is not None, dtype)


@needs_kernels
@pytest.mark.parametrize("rows", [1, 5])
def test_a_float16_cache_is_written_rounded_to_nearest_and_read_as_those_float32_values(rows: int):
    # The float16 cache's numbers are the float32 cache's rounded once on the way in: attending over
    # it gives, bit for bit, what attending over a float32 cache holding the rounded values gives.
    heads, kv_heads, dim, length = 6, 2, 64, 70
    projected, cos, sin, cache = attention_inputs(rows, heads, kv_heads, dim, length, 7)
    half_cache = [c.half() for c in cache]
    q = torch.ops.specdec.rotate_into_cache(projected, cos, sin, *half_cache, length, heads, dim ** -0.5)
    wide_q = torch.ops.specdec.rotate_into_cache(projected, cos, sin, *cache, length, heads, dim ** -0.5)
    assert torch.equal(q, wide_q)
    for half, wide in zip(half_cache, cache, strict=True):
        assert torch.equal(half, wide.half())  # the new rows rounded as torch rounds, the rest untouched
    visible = torch.tensor([length + m - (m % 2) for m in range(rows)])
    for seen in (None, visible):
        out = torch.ops.specdec.attend_rows(q, *half_cache, length, seen)
        expected = torch.ops.specdec.attend_rows(q, *(c.float() for c in half_cache), length, seen)
        assert torch.equal(out, expected)
    # and it is the float32 cache's attention to float16's rounding, not something else
    assert torch.allclose(out, torch.ops.specdec.attend_rows(q, *cache, length, seen), rtol=1e-2, atol=1e-2)


@needs_kernels
def test_a_float16_cache_with_a_head_size_off_eight_is_refused_in_one_line():
    keys = values = torch.zeros(1, 8, 12, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        torch.ops.specdec.attend_rows(torch.zeros(1, 1, 12), keys, values, 0)


@needs_kernels
def test_a_softmax_over_far_apart_scores_gives_the_far_ones_no_weight():
    projected, cos, sin, (keys, values) = attention_inputs(1, 1, 1, 16, 5, 0)
    cos, sin = torch.ones_like(cos), torch.zeros_like(sin)  # no rotation: the scores are q . k
    projected[0, :16], projected[0, 16:32] = 100.0, -1.0  # the query, and the new row's key
    keys[0, :5] = -1.0
    keys[0, 2] = 1.0  # the only key the query agrees with, by 800 before the softmax
    out = KernelAttention(1, 1, 16)(projected, cos, sin, keys, values, 5)
    assert torch.equal(out[0], values[0, 2])


def test_the_runner_uses_the_kernel_attention_and_swiglu_where_it_can():
    kernel = quantized_kernels.available()
    assert isinstance(attention(4, 2, 16), KernelAttention) == kernel
    assert type(attention(4, 2, 24)) is Attention  # the kernel is compiled for a few head sizes only
    assert isinstance(swiglu(64), KernelSwiGlu) == kernel
    assert type(swiglu(60)) is SwiGlu  # the kernel works in whole 8-lane vectors


@needs_kernels
@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 8), width=st.sampled_from([8, 64, 136]), spread=st.sampled_from([0.1, 5.0, 120.0]),
       seed=st.integers(0, 2**16))
def test_the_kernel_swiglu_is_pytorchs_to_rounding_and_the_same_for_any_number_of_rows(
    rows: int, width: int, spread: float, seed: int
):
    torch.manual_seed(seed)
    gate_up = torch.randn(rows, 2 * width) * spread
    out = KernelSwiGlu(width)(gate_up)
    assert torch.allclose(out, SwiGlu(width)(gate_up), rtol=1e-5, atol=1e-30)
    assert torch.equal(out, torch.cat([KernelSwiGlu(width)(gate_up[i : i + 1]) for i in range(rows)]))


def test_a_build_that_fails_once_is_tried_again_before_falling_back(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setattr(quantized_kernels.platformdirs, "user_cache_dir", lambda app: str(tmp_path / "cache"))
    builds: list[Path] = []

    def flaky_build(target: Path) -> None:  # as a compiler killed once on a loaded machine
        builds.append(target)
        if len(builds) == 1:
            raise RuntimeError("the build failed (exit status -9): ")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"built")

    loaded: list[str] = []
    monkeypatch.setattr(quantized_kernels, "_build", flaky_build)
    monkeypatch.setattr(quantized_kernels.torch.ops, "load_library", loaded.append)
    quantized_kernels._load()
    assert len(builds) == 2 and loaded == [str(builds[0])]
