"""The draft's cache alone, live: `hybrid` over the same target text with the draft's keys and values
in float16 and in float32. The offline count (``2026-12-07-kv-float16-agreement.py``) found the
draft's greedy token as often with either cache; this checks what a running `hybrid` makes of it.

All 28 suite prompts interleaved per prompt, the order rotating, greedy, 128 new tokens, the
target's caches in float32 for every variant (so the target writes one text): target-only, `hybrid`
with the draft's caches in float16 ("draft16") and in float32 ("draft32"), each on an engine of its
own. Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-07-kv-float16-draft-live.py
Output of 2026-12-07 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-07-kv-float16-draft-live.txt.
"""

from __future__ import annotations

import torch
from paired_levers import Reply, engine_with, hybrid_reply, interleaved, lean_forward, print_paired

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
target, draft = lean_forward(runtime.pair.target.runner), lean_forward(runtime.pair.draft.runner)
target.keep_kv_in(torch.float32)
engines = {name: engine_with(runtime) for name in ("target", "draft16", "draft32")}


def run(ids: list[int], name: str) -> Reply:
    draft.keep_kv_in(torch.float32 if name == "draft32" else torch.float16)
    return hybrid_reply(runtime, engines[name], ids, name)


print_paired(interleaved(runtime, ["draft16", "draft32"], run), [("draft16", "draft32")])
