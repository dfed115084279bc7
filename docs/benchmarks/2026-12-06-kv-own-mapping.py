"""The KV caches in anonymous mappings of their own (``KVCache``, kept) against caches from the
allocator (the form before, rebuilt here): the speed side of this folder's README section "The KV
caches in mappings of their own". The memory side is ``2026-12-06-long-reply-memory.py``.

All 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens: target-only and
`hybrid` on mapped caches ("target", "mapped"), `hybrid` on the allocator's ("heap"), each variant
with an engine of its own and caches of its own for both models, kept from reply to reply as an
engine keeps its caches (a fresh cache a reply would add its first writes to every reply). Every
reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-06-kv-own-mapping.py
Output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-06-kv-own-mapping.txt and -2.txt. Its engines
learn their verify costs apart, so their drafts can differ (the step counts per line); the passes
themselves, timed alone in one process (a one-row target pass after 100 and 400 tokens, the two
kinds alternating 30 times): mapped / heap 0.989 and 0.994.
"""

from __future__ import annotations

import torch
from paired_levers import Reply, engine_with, hybrid_reply, interleaved, lean_forward, print_paired

from specdec_tui.config import Settings
from specdec_tui.models.kv_cache import KVCache
from specdec_tui.runtime import load_runtime


class HeapCache:
    """The caches before: a tensor per layer's keys and one per its values, from the allocator."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int) -> None:
        self.capacity = capacity
        self.keys = [torch.empty(kv_heads, capacity, head_dim) for _ in range(layers)]
        self.values = [torch.empty(kv_heads, capacity, head_dim) for _ in range(layers)]

    def grown(self, capacity: int, length: int) -> HeapCache:
        kv_heads, _, head_dim = self.keys[0].shape
        grown = HeapCache(len(self.keys), kv_heads, head_dim, capacity)
        for old, new in ((self.keys, grown.keys), (self.values, grown.values)):
            for src, dst in zip(old, new, strict=True):
                dst[:, :length] = src[:, :length]
        return grown


runtime = load_runtime(Settings())
models = [lean_forward(runtime.pair.target.runner), lean_forward(runtime.pair.draft.runner)]
variants = {"target": KVCache, "mapped": KVCache, "heap": HeapCache}
engines = {name: engine_with(runtime) for name in variants}
caches = {(name, i): kind(len(model.layers), model.kv_heads, model.head_dim, 256)
          for name, kind in variants.items() for i, model in enumerate(models)}


def run(ids: list[int], name: str) -> Reply:
    for i, model in enumerate(models):
        model.use_cache(caches[name, i])  # type: ignore[arg-type]  # a HeapCache has KVCache's interface
    reply = hybrid_reply(runtime, engines[name], ids, name)
    for i, model in enumerate(models):
        caches[name, i] = model.cache  # grown, perhaps
    return reply


print_paired(interleaved(runtime, ["mapped", "heap"], run), [("mapped", "heap")])
