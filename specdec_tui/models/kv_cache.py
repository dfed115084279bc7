"""Every layer's keys and values of one model, in an anonymous memory mapping of their own.

From the allocator, a cache lives in glibc's heap (one layer's cache is under its mmap threshold),
and the smaller caches a growing context leaves behind stay resident there. A mapping of its own
holds only the pages written, and a grown cache releases the old one's pages layer by layer as it
copies them, so growing adds one layer's copy at a time, not a second copy of the whole cache. A
1,042-token reply of the default pair took the process to 3.02 GB from the heap, 2.96 GB so.

The elements are float32 unless asked for float16 (as llama.cpp keeps its caches): half the memory a
position takes, and half the bytes each step's attention reads. The kernels write float16 rounded to
nearest and widen it exactly on every read, so a verify block still equals its single steps.
"""

from __future__ import annotations

import mmap

import torch

#: The ``kv_cache`` setting's names for the element types a cache can hold.
KV_CACHE_DTYPES = {"float16": torch.float16, "float32": torch.float32}


class KVCache:
    """Keys and values of ``layers`` layers, each ``(kv_heads, capacity, head_dim)`` of ``dtype``, for
    ``capacity`` positions."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.capacity, self.dtype = capacity, dtype
        self.layer_bytes = 2 * kv_heads * capacity * head_dim * dtype.itemsize
        #: What a position takes over every layer's keys and values.
        self.position_bytes = layers * 2 * kv_heads * head_dim * dtype.itemsize
        #: The most positions written so far (their pages resident), whatever the length is now.
        self.written = 0
        # Private: a shared anonymous mapping's released pages stay in memory until it is unmapped.
        self.mapping = mmap.mmap(-1, layers * self.layer_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        # A layer's keys and values side by side, so that releasing a layer is one range.
        every = torch.frombuffer(self.mapping, dtype=dtype).view(layers, 2, kv_heads, capacity, head_dim)
        self.keys: list[torch.Tensor] = [layer[0] for layer in every]
        self.values: list[torch.Tensor] = [layer[1] for layer in every]

    def grown(self, capacity: int, length: int, dtype: torch.dtype | None = None) -> KVCache:
        """A cache of ``capacity`` positions holding this one's first ``length``, as ``dtype`` where given
        (narrowed rounded to nearest, as the kernels write float16). This one's pages go back to the
        system as each layer is copied: do not use it afterwards."""
        layers, (kv_heads, _, head_dim) = len(self.keys), self.keys[0].shape
        grown = KVCache(layers, kv_heads, head_dim, capacity, dtype or self.dtype)
        for i in range(layers):
            grown.keys[i][:, :length] = self.keys[i][:, :length]
            grown.values[i][:, :length] = self.values[i][:, :length]
            self._release(i)
        grown.written = length
        return grown

    def remove(self, at: int, count: int, length: int) -> None:
        """Of the first ``length`` positions, forget ``count`` from ``at`` on, those after them moved down
        in place."""
        for keys_or_values in (*self.keys, *self.values):
            # The rows move down over themselves, so through a copy.
            keys_or_values[:, at : length - count] = keys_or_values[:, at + count : length].clone()

    def release_past(self, positions: int) -> int:
        """Hand back the whole pages that hold only positions from ``positions`` on, in every layer and
        head (they read as zeros until written again); the bytes handed back."""
        if positions >= self.written:
            return 0
        # The mapping is planes of (layer, keys or values, head) after one another, each a position a row.
        planes = len(self.keys) * 2 * self.keys[0].shape[0]
        plane_bytes = self.layer_bytes * len(self.keys) // planes
        row_bytes = plane_bytes // self.capacity
        released = sum(self._release_range(plane * plane_bytes + positions * row_bytes, (plane + 1) * plane_bytes)
                       for plane in range(planes))
        self.written = positions
        return released

    def _release(self, layer: int) -> None:
        self._release_range(layer * self.layer_bytes, (layer + 1) * self.layer_bytes)

    def _release_range(self, start: int, end: int) -> int:
        """Drop the whole pages inside bytes ``start`` to ``end`` of the mapping (madvise takes ranges from a
        page's start); the bytes dropped."""
        start = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        end = end // mmap.PAGESIZE * mmap.PAGESIZE
        if end <= start:
            return 0
        self.mapping.madvise(mmap.MADV_DONTNEED, start, end - start)
        return end - start
