"""Does a float16 cache make the draft agree less with the target? Offline, on fixed text: the
agreement side of this folder's README section "The KV caches in float16".

For each suite prompt, the target's greedy reply (128 new tokens) with its caches in float32 and
in float16; then, over each of those replies, the draft's greedy token after every prefix (one
teacher-forced pass, ``draft_guesses``) with the draft's caches in float16 and in float32. The share
of positions where the draft's token is the target's, per category: a float16 cache that cost
agreement would show as a lower share over the same text.

Run: .venv/bin/python docs/benchmarks/2026-12-07-kv-float16-agreement.py
Output of 2026-12-07 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-07-kv-float16-agreement.txt.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from paired_levers import draft_guesses, lean_forward, mode_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.kv_cache import KV_CACHE_DTYPES
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
target, draft = lean_forward(runtime.pair.target.runner), lean_forward(runtime.pair.draft.runner)
assert runtime.engine.draft is not None
agreed: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
for item in load_suite(default_suite_path()):
    ids = runtime.prompt_ids(item.messages)
    for text_kv, text_dtype in KV_CACHE_DTYPES.items():
        target.keep_kv_in(text_dtype)
        reply = list(mode_reply(runtime, ids, "target").token_ids)
        for draft_kv, draft_dtype in KV_CACHE_DTYPES.items():
            draft.keep_kv_in(draft_dtype)
            guesses = draft_guesses(runtime.engine.draft, ids, reply)[0]
            hits = sum(guess == token for guess, token in zip(guesses, reply, strict=True))
            counts = agreed[item.category, text_kv, draft_kv]
            counts[0] += hits
            counts[1] += len(reply)
            print(f"{item.id}: the target's reply with {text_kv} caches ({len(reply)} tokens), the draft with "
                  f"{draft_kv} caches: {hits / len(reply):.3f}", flush=True)
    target.keep_kv_in(torch.float16)
    draft.keep_kv_in(torch.float16)
for (category, text_kv, draft_kv), (hits, total) in sorted(agreed.items()):
    print(f"{category}: the target's replies with {text_kv} caches, the draft with {draft_kv}: "
          f"{hits} of {total} positions, {hits / total:.3f}")
