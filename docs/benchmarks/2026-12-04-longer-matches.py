"""The paired lever run for prompt lookups that match up to 8 tokens back instead of 4 (this folder's README,
"Longer lookup matches, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid), each variant with its own
engine over the one loaded pair. Variants:

- M4: hybrid whose lookups (its own and the copy after a model draft) match the context's last 4
  tokens at most, then 3: the latest earlier occurrence of the longest match is copied;
- M8: the same lookups matching up to the last 8 tokens, so among several earlier occurrences of
  the last 3 or 4 tokens the one that agrees with more of the context before them is copied.

Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-04-longer-matches.py M4 M8
The output is 2026-12-04-longer-matches.txt beside this file.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, decoded, engine_with, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.drafters import HybridDrafter
from specdec_tui.runtime import load_runtime

VARIANTS = sys.argv[1:] or ["M4", "M8"]
runtime = load_runtime(Settings())
# Target-only gets an engine of its own: an engine's verify-cost table learns from every pass it
# runs, so a variant sharing it with target-only would plan from more one-row passes than the other.
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[name]
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if isinstance(drafter, HybridDrafter):
        drafter.lookup.max_ngram = int(name[1:])
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, f"max n-gram {name[1:]}" if drafter else ""


print_paired(interleaved(runtime, VARIANTS, run), [("M8", "M4")])
