"""Keys and values kept in float16 (``KVCache``'s default since 2026-12-07) against float32, the form
before: the speed side of this folder's README section "The KV caches in float16". The memory
side is ``2026-12-06-long-reply-memory.py``.

``passes``: the target's whole pass over 1, 4 and 9 rows after 128, 1024 and 3000 tokens, and a draft
token after the same, each with its caches in float16 and in float32 in turn (both caches filled
with the same context, swapped between passes), the median of 20 rounds.

``suite [PROMPTS]``: every prompt of the suite (or of PROMPTS) interleaved per prompt, the order rotating, greedy, 128 new tokens:
target-only and `hybrid` with float16 caches ("target", "hybrid") and with float32 caches
("target32", "hybrid32"), each on an engine of its own, both models' caches kept from reply to
reply. The two precisions give each their own numbers, so each `hybrid` reply is asserted equal to
its own precision's target-only reply; the ratios the goals use are `hybrid` over its target-only,
and the two precisions' replies are compared for how many came out the same text.

Run: .venv/bin/python docs/benchmarks/2026-12-07-kv-float16.py passes   (or suite [PROMPTS.jsonl], the bundled
suite unless a prompts file is given)
Output of 2026-12-07 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-07-kv-float16-passes.txt, -suite.txt and
-suite-2.txt, -suite-3.txt (the later runs also print each `hybrid` reply's acceptance, float16 / float32),
-held-out.txt (``suite 2026-12-05-held-out-prompts.jsonl``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from paired_levers import Reply, engine_with, hybrid_reply, lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.models.kv_cache import KVCache
from specdec_tui.runtime import load_runtime

PRECISIONS = {"float16": torch.float16, "float32": torch.float32}

runtime = load_runtime(Settings())
target, draft = lean_forward(runtime.pair.target.runner), lean_forward(runtime.pair.draft.runner)


def fresh_cache(model: FastLlama, dtype: torch.dtype, capacity: int = 256) -> KVCache:
    return KVCache(len(model.layers), model.kv_heads, model.head_dim, capacity, dtype)


def passes() -> None:
    for context in (128, 1024, 3000):
        filled = {}
        for name, dtype in PRECISIONS.items():
            for model in (target, draft):
                model.use_cache(fresh_cache(model, dtype, context + 64))
                model.reset()
                model.forward(list(range(1000, 1000 + context)), 1)
                filled[name, id(model)] = model.cache
        times: dict[tuple[str, str], list[float]] = defaultdict(list)
        for round_ in range(20):
            names = list(PRECISIONS)[round_ % 2 :] + list(PRECISIONS)[: round_ % 2]
            for kind, model, rows in (("target 1", target, 1), ("target 4", target, 4), ("target 9", target, 9),
                                      ("draft token", draft, 1)):
                for name in names:
                    model.use_cache(filled[name, id(model)])
                    model.length = context
                    start = time.perf_counter()
                    model.forward(list(range(2000, 2000 + rows)), rows)
                    times[kind, name].append(time.perf_counter() - start)
        for kind in ("target 1", "target 4", "target 9", "draft token"):
            half, full = (statistics.median(times[kind, name]) for name in PRECISIONS)
            print(f"after {context}: {kind} row(s): float16 {half * 1000:.1f} ms, float32 {full * 1000:.1f} ms, "
                  f"float16 / float32 {half / full:.3f}", flush=True)


def suite() -> None:
    names = {"target": torch.float16, "hybrid": torch.float16, "target32": torch.float32, "hybrid32": torch.float32}
    engines = {name: engine_with(runtime) for name in names}
    caches = {(name, i): fresh_cache(model, dtype) for name, dtype in names.items()
              for i, model in enumerate((target, draft))}

    def run(ids: list[int], name: str) -> Reply:
        for i, model in enumerate((target, draft)):
            model.use_cache(caches[name, i])
        reply = hybrid_reply(runtime, engines[name], ids, "target" if name.startswith("target") else name)
        for i, model in enumerate((target, draft)):
            caches[name, i] = model.cache  # grown, perhaps
        return reply

    warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
    for name in names:
        run(warm, name)
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    same_text = 0
    for i, item in enumerate(load_suite(Path(sys.argv[2]) if len(sys.argv) > 2 else default_suite_path())):
        ids = runtime.prompt_ids(item.messages)
        order = list(names)[i % 4 :] + list(names)[: i % 4]
        results = {name: run(ids, name) for name in order}
        for hybrid, own_target in (("hybrid", "target"), ("hybrid32", "target32")):
            assert results[hybrid][0] == results[own_target][0], (item.id, hybrid)  # identical to its target-only
        same_text += results["target"][0] == results["target32"][0]
        speed = {name: summary.tokens_per_s for name, (_, summary, _) in results.items()}
        accepted = {name: summary.acceptance_rate or 0.0 for name, (_, summary, _) in results.items()}
        by = ratios[item.category]
        by["hybrid / target"].append(speed["hybrid"] / speed["target"])
        by["hybrid32 / target32"].append(speed["hybrid32"] / speed["target32"])
        by["target / target32"].append(speed["target"] / speed["target32"])
        by["hybrid / hybrid32"].append(speed["hybrid"] / speed["hybrid32"])
        by["hybrid acceptance"].append(accepted["hybrid"])
        by["hybrid32 acceptance"].append(accepted["hybrid32"])
        print(" | ".join([item.id, *(f"{name} {speed[name]:.1f} tok/s" for name in names),
                          f"acceptance {accepted['hybrid']:.2f} / {accepted['hybrid32']:.2f}",
                          f"same text as float32: {results['target'][0] == results['target32'][0]}"]), flush=True)
    for category, by in ratios.items():
        print(category, {key: f"median {statistics.median(v):.3f} (min {min(v):.3f}, max {max(v):.3f})"
                         for key, v in by.items()})
    print(f"target-only replies the same text in both precisions: {same_text} of {i + 1}")


{"passes": passes, "suite": suite}[sys.argv[1]]()
