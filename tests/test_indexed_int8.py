"""Int8 weights held as 4-bit indices into per-column tables (a Q4_K tensor's), and their kernel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from tiny import save_tiny_gguf
from torch import nn

from specdec_tui.models import quantized_kernels
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.fast_llama import LAYER_LINEARS, FastLlama
from specdec_tui.models.loader import load_model, load_pair
from specdec_tui.models.precision import IndexedInt8Linear, PackedInt8Linear, pack_linears
from specdec_tui.models.q4k import BLOCK_BYTES, BLOCK_INPUTS, q4k_parts, q4k_weight

needs_avx512_vnni = pytest.mark.skipif(
    not quantized_kernels.available() or "avx512_vnni" not in quantized_kernels.instruction_sets(),
    reason="indexed_int8_linear runs on AVX-512 VNNI only",
)


def q4k_blocks(rows: int, width: int, seed: int) -> np.ndarray:
    """Random Q4_K blocks with ordinary float16 scales (random bytes elsewhere)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows * width // BLOCK_INPUTS, BLOCK_BYTES), dtype=np.uint8)
    blocks[:, 0:2] = rng.uniform(1e-4, 2e-3, size=(len(blocks), 1)).astype(np.float16).view(np.uint8)
    blocks[:, 2:4] = rng.uniform(1e-4, 2e-3, size=(len(blocks), 1)).astype(np.float16).view(np.uint8)
    return blocks


def random_parts(rows: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randint(0, 16, (rows, width), generator=generator, dtype=torch.uint8)
    steps = torch.rand(rows, width // 32, generator=generator) * 0.02 + 1e-4
    offsets = (torch.rand(rows, width // 32, generator=generator) - 0.3) * 0.2
    return indices, steps, offsets


def test_q4k_parts_give_the_weights_gguf_dequantizes():
    rows, width = 6, 512
    blocks = q4k_blocks(rows, width, seed=1)
    indices, steps, offsets = q4k_parts(blocks, rows, width)
    weight = q4k_weight((indices, steps, offsets))
    expected = torch.from_numpy(dequantize(blocks, GGMLQuantizationType.Q4_K).reshape(rows, width))
    assert int(indices.max()) <= 15
    assert torch.equal(weight, expected)


def test_q4k_parts_refuse_bytes_of_another_shape_in_one_line():
    with pytest.raises(ValueError, match="not a 3 x 512 Q4_K tensor"):
        q4k_parts(q4k_blocks(2, 512, seed=0), 3, 512)


def test_the_tables_round_the_weights_over_the_column_scale_as_pack_int8_does_but_rarely():
    indices, steps, offsets = random_parts(40, 256, seed=2)
    a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
    weight = q4k_weight((indices, steps, offsets))
    assert torch.equal(scales, weight.abs().amax(dim=1) / 127.0)
    expanded = quantized_kernels.expand_tables(indices, a, b).float()
    exact = weight / scales[:, None]
    assert (expanded - exact).abs().max() <= 0.5 + 16 / 256
    assert (expanded == torch.round(exact)).float().mean() > 0.95


def test_index_tables_refuse_a_step_count_that_does_not_fit_in_one_line():
    indices, steps, offsets = random_parts(4, 64, seed=3)
    with pytest.raises(ValueError, match="need a step and an offset per 32 inputs"):
        quantized_kernels.index_tables(indices, steps[:, :1], offsets)


@needs_avx512_vnni
@pytest.mark.parametrize("out_features", [4, 37, 64])
@pytest.mark.parametrize("width", [64, 288])
def test_indexed_int8_linear_gives_int8_linears_bits_on_the_expanded_weights(out_features: int, width: int):
    indices, steps, offsets = random_parts(out_features, width, seed=out_features + width)
    a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
    records = quantized_kernels.pack_indexed_int8(indices, a, b)
    blocks, int8_scales, int8_sums = quantized_kernels.int8_blocks(quantized_kernels.expand_tables(indices, a, b), scales)
    bias = torch.randn(out_features)
    with quantized_kernels.using_indexed_int8_up_to(1000):  # every call reads the indices
        for rows in [*range(1, 15), 25, 40]:  # past one pass's twelve, the records are decoded once
            x = torch.randn(rows, width)
            for extra in (None, bias):
                indexed = torch.ops.specdec.indexed_int8_linear(x, blocks, int8_scales, int8_sums, records, extra,
                                                                out_features)
                int8 = torch.ops.specdec.int8_linear(x, blocks, int8_scales, int8_sums, extra, out_features)
                assert torch.equal(indexed, int8), (rows, extra is None)


@needs_avx512_vnni
def test_a_linear_without_its_int8_blocks_reads_its_indices_in_every_call_with_the_same_bits():
    indices, steps, offsets = random_parts(37, 288, seed=11)
    a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
    records = quantized_kernels.pack_indexed_int8(indices, a, b)
    blocks, int8_scales, int8_sums = quantized_kernels.int8_blocks(quantized_kernels.expand_tables(indices, a, b), scales)
    no_blocks = torch.empty(0, dtype=torch.int8)
    with quantized_kernels.using_indexed_int8_up_to(0):  # a linear with blocks would read them in every call
        for rows in [1, 3, 4, 7, 8, 9, 12, 13, 16, 25, 40, 150]:  # one pass, then a pass that keeps its decoding
            x = torch.randn(rows, 288)
            lean = torch.ops.specdec.indexed_int8_linear(x, no_blocks, int8_scales, int8_sums, records, None, 37)
            assert torch.equal(lean, torch.ops.specdec.int8_linear(x, blocks, int8_scales, int8_sums, None, 37)), rows


def test_a_linear_without_its_int8_blocks_refuses_an_instruction_set_without_the_indices_in_one_line():
    if not quantized_kernels.available():
        pytest.skip("the package's kernels do not build here")
    indices, steps, offsets = random_parts(8, 64, seed=2)
    a, b, scales = quantized_kernels.index_tables(indices, steps, offsets)
    records = quantized_kernels.pack_indexed_int8(indices, a, b)
    _, int8_scales, int8_sums = quantized_kernels.int8_blocks(quantized_kernels.expand_tables(indices, a, b), scales)
    with (quantized_kernels.using_instruction_set("avx2"),
          pytest.raises(RuntimeError, match="a linear without int8 blocks needs AVX-512 VNNI, and the chosen "
                                            "instruction set is avx2")):
        torch.ops.specdec.indexed_int8_linear(torch.randn(2, 64), torch.empty(0, dtype=torch.int8), int8_scales,
                                              int8_sums, records, None, 8)


needs_kernels = pytest.mark.skipif(not quantized_kernels.available(), reason="the package's kernels do not build here")


def layer_linear_kinds(runner: FastLlama) -> set[type]:
    return {type(getattr(layer, name)) for layer in runner.layers for name in LAYER_LINEARS}


def verify_then_steps(runner: FastLlama) -> tuple[torch.Tensor, torch.Tensor]:
    """A prompt's logits and a verify block's, then the same rows one step at a time."""
    prompt, block = [5, 17, 42, 99], [7, 8, 9, 11, 12]
    runner.reset()
    whole = torch.cat([runner.forward(prompt, len(prompt)), runner.forward(block, len(block))])
    runner.reset()
    stepped = torch.cat([runner.forward([token], 1) for token in prompt + block])
    return whole, stepped


@needs_kernels
def test_a_gguf_files_q4k_linears_load_as_indexed_int8_with_the_same_numbers_either_way_and_from_the_cache(
        tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf", q4k_linears=True)
    cache = ModelCache(tmp_path / "cache")
    loaded = load_model(str(tmp_path / "tiny.gguf"), precision="int8", device=torch.device("cpu"), cache=cache)
    runner = loaded.runner
    assert isinstance(runner, FastLlama) and runner.kernel_layers is not None
    assert layer_linear_kinds(runner) == {IndexedInt8Linear}
    assert type(runner.head) is PackedInt8Linear  # the file's head is float32, not Q4_K
    with quantized_kernels.using_indexed_int8_up_to(1000):  # the indices wherever this processor reads them
        indexed = verify_then_steps(runner)
    with quantized_kernels.using_indexed_int8_up_to(0):  # the int8 blocks
        blocks = verify_then_steps(runner)
    assert torch.equal(indexed[0], indexed[1])  # a verify block is its single steps
    assert torch.equal(indexed[0], blocks[0]) and torch.equal(indexed[1], blocks[1])

    again = load_model(str(tmp_path / "tiny.gguf"), precision="int8", device=torch.device("cpu"), cache=cache)
    assert layer_linear_kinds(again.runner) == {IndexedInt8Linear}
    assert torch.equal(verify_then_steps(again.runner)[0], blocks[0])


@needs_kernels
def test_a_linear_is_indexed_only_where_its_weights_are_its_q4k_tensors():
    indices, steps, offsets = random_parts(8, 64, seed=5)
    linear = nn.Linear(64, 8)
    with torch.no_grad():
        linear.weight.copy_(q4k_weight((indices, steps, offsets)))
    other = nn.Linear(64, 8)
    packed = pack_linears([linear, other, linear], "int8", True, lambda done, total: None,
                          [lambda: (indices, steps, offsets), lambda: (indices, steps, offsets), lambda: None])
    assert [type(module) for module in packed] == [IndexedInt8Linear, PackedInt8Linear, PackedInt8Linear]
    x = torch.randn(3, 64)
    expanded = quantized_kernels.expand_tables(indices, *quantized_kernels.index_tables(indices, steps, offsets)[:2])
    indexed = packed[0]
    assert torch.equal(indexed.packed, quantized_kernels.int8_blocks(expanded, indexed.scales[:8])[0])
    with quantized_kernels.using_indexed_int8_up_to(1000):
        out = indexed(x)
    assert torch.equal(out, torch.ops.specdec.int8_linear(x, indexed.packed, indexed.scales, indexed.column_sums,
                                                          indexed.bias, 8))


@needs_kernels
def test_a_lean_target_drops_its_int8_blocks_where_the_indices_are_read_and_keeps_its_numbers(tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf", q4k_linears=True)
    cache = ModelCache(tmp_path / "cache")
    full = load_model(str(tmp_path / "tiny.gguf"), precision="int8", device=torch.device("cpu"), cache=cache)
    messages: list[str] = []
    lean = load_pair(str(tmp_path / "tiny.gguf"), None, precision="int8", draft_precision="int4", device="cpu",
                     cache_dir=tmp_path / "cache", lean_target=True,
                     progress=lambda progress: messages.append(progress.detail))
    runner = lean.target.runner
    assert isinstance(runner, FastLlama) and runner.kernel_layers is not None
    indexed = [getattr(layer, name) for layer in runner.layers for name in LAYER_LINEARS]
    assert indexed and all(isinstance(linear, IndexedInt8Linear) for linear in indexed)
    if quantized_kernels.reads_indices():
        assert all(linear.packed.numel() == 0 for linear in indexed)
        # the one-call layers hold no blocks either: nothing keeps them in memory
        assert not any(weight.dtype == torch.int8 and weight.numel() > 0 for weight in runner.kernel_layers[5])
        assert messages[-1] == f"lean: {len(indexed)} linears read only their indices"
    else:
        assert all(linear.packed.numel() > 0 for linear in indexed)
        assert "so they stay" in messages[-1]
    whole, stepped = verify_then_steps(runner)
    assert torch.equal(whole, stepped)  # a verify block is its single steps
    assert torch.equal(whole, verify_then_steps(full.runner)[0])


@needs_kernels
def test_a_lean_target_without_q4k_tensors_says_it_has_no_indices_and_loads_as_before(tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf")  # float32 linears: packed as int8 blocks only
    messages: list[str] = []
    lean = load_pair(str(tmp_path / "tiny.gguf"), None, precision="int8", draft_precision="int4", device="cpu",
                     cache_dir=tmp_path / "cache", lean_target=True,
                     progress=lambda progress: messages.append(progress.detail))
    runner = lean.target.runner
    assert isinstance(runner, FastLlama)
    assert layer_linear_kinds(runner) == {PackedInt8Linear}
    assert all(getattr(layer, name).packed.numel() > 0 for layer in runner.layers for name in LAYER_LINEARS)
    if quantized_kernels.reads_indices():
        assert messages[-1] == "lean: no linear holds indices (an int8 target packed from a GGUF's Q4_K tensors does)"
    whole, stepped = verify_then_steps(runner)
    assert torch.equal(whole, stepped)
