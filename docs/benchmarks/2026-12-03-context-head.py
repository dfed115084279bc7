"""The paired lever run of 2026-12-03 for a draft head limited to the leading ids and the context's
(this folder's README, "A draft head of the context's ids, paired").

Interleaved per prompt in one process (the order rotates from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid); one engine per variant
(its own policies and verify-cost table) over the one loaded pair, whose draft's head is set before
each reply:

- W: the whole head (today's default, ``draft_head_tokens = 0``);
- H32, H64, H96: ids below 32768 / 65536 / 98304, the special ids, and every id the reply's
  context has held (``draft_head_tokens = N``);
- H32n: ids below 32768 and the special ids only, as the head trim was before (no context ids).

Run: .venv/bin/python docs/benchmarks/2026-12-03-context-head.py W H64 H96
Every variant is compared with the first, paired per prompt; the outputs of that morning are
2026-12-03-context-head-*.txt beside this file, that of 2026-12-05 on the Intel Xeon (``W H32 H64``,
the defaults of then: K = 8) 2026-12-05-context-head-xeon.txt.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, decoded, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.runtime import build_engine, load_runtime

HEADS = {"W": 0, "H32": 32768, "H64": 65536, "H96": 98304, "H32n": 32768}
VARIANTS = sys.argv[1:] or ["W", "H64", "H96"]
runtime = load_runtime(Settings())
draft = runtime.pair.draft
always = (*draft.tokenizer.all_special_ids, *draft.eos_ids)
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    draft.runner.limit_head(HEADS.get(name, 0), always)
    if name == "H32n":  # no context ids: every id fed is forgotten at once
        draft.runner.context_head.see = lambda ids: None
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    event = decoded(engine, ids, params, drafter)
    head = draft.runner.context_head
    return event.token_ids, event.summary, f"head ids past the leading {len(head.kept_ids()) if head else 0}"


print_paired(interleaved(runtime, VARIANTS, run), [(name, VARIANTS[0]) for name in VARIANTS[1:]])
