"""The KV cache's growth: it keeps what was written, and it never holds two whole copies."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import tiny_model

from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.models.kv_cache import KVCache


def status_kb(field: str, path: str = "/proc/self/status") -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_grown_cache_holds_every_layers_first_positions_bit_for_bit(dtype: torch.dtype):
    cache = KVCache(layers=3, kv_heads=2, head_dim=8, capacity=16, dtype=dtype)
    written = [(torch.randn(2, 16, 8, dtype=dtype), torch.randn(2, 16, 8, dtype=dtype)) for _ in range(3)]
    for i, (k, v) in enumerate(written):
        cache.keys[i].copy_(k)
        cache.values[i].copy_(v)
    grown = cache.grown(capacity=40, length=11)
    assert grown.capacity == 40 and grown.dtype == dtype
    for i, (k, v) in enumerate(written):
        assert grown.keys[i].shape == grown.values[i].shape == (2, 40, 8)
        assert grown.keys[i].is_contiguous() and grown.values[i].is_contiguous()
        assert torch.equal(grown.keys[i][:, :11], k[:, :11])
        assert torch.equal(grown.values[i][:, :11], v[:, :11])


def test_a_reply_across_a_growth_is_bit_identical_to_one_in_a_cache_grown_beforehand():
    def steps(grow_first: bool) -> torch.Tensor:
        model = FastLlama.from_model(tiny_model("qwen2"), "fp32")
        if grow_first:
            model._grow(1024)
        assert model.cache.capacity == (1024 if grow_first else 256)
        logits = [model.forward([3 + position % 50], 1) for position in range(300)]
        return torch.cat(logits)

    assert torch.equal(steps(grow_first=False), steps(grow_first=True))


def test_growing_a_written_cache_never_holds_two_whole_copies():
    # 8 layers of 4 MB: a copy of the whole cache would add 32 MB to the peak, one layer's copy 4 MB.
    layers, layer_mb = 8, 4
    cache = KVCache(layers=layers, kv_heads=2, head_dim=128, capacity=layer_mb * 2**20 // (2 * 2 * 128 * 4))
    for i in range(layers):
        cache.keys[i].fill_(1.0)
        cache.values[i].fill_(2.0)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the resident size now
    except OSError:
        pytest.skip("this kernel cannot reset a process's peak resident size")
    before, shared_before = status_kb("VmRSS"), status_kb("Shmem", "/proc/meminfo")
    grown = cache.grown(capacity=2 * cache.capacity, length=cache.capacity)
    peak_growth_mb = (status_kb("VmHWM") - before) / 1024
    assert peak_growth_mb < 3 * layer_mb, f"the peak grew by {peak_growth_mb:.0f} MB"
    # Released pages of a shared mapping leave the process but stay in the system's shared memory
    # until it is unmapped; the cache's are private, so the system gets them back.
    shared_growth_mb = (status_kb("Shmem", "/proc/meminfo") - shared_before) / 1024
    assert shared_growth_mb < layer_mb, f"the system's shared memory grew by {shared_growth_mb:.0f} MB"
    assert float(grown.values[-1][0, -1 + cache.capacity, 0]) == 2.0
