"""Does a verify-cost table that target-only's passes also feed change `hybrid`'s speed? (this folder's README,
"Longer lookup matches, paired (not kept)", last paragraph.)

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid). Variants:

- S: `hybrid` on the engine target-only also runs on, as `specdec-bench` and a chat that compares
  replies do: its table learns from target-only's one-row passes too;
- O: `hybrid` on an engine of its own.

Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-04-shared-table.py S O
The output is 2026-12-04-shared-table.txt beside this file.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

VARIANTS = sys.argv[1:] or ["S", "O"]
runtime = load_runtime(Settings())
shared, own = engine_with(runtime), engine_with(runtime)
engines = {"target": shared, "S": shared, "O": own}


def run(ids: list[int], name: str) -> Reply:
    return hybrid_reply(runtime, engines[name], ids, name)


print_paired(interleaved(runtime, VARIANTS, run), [("O", "S")])
