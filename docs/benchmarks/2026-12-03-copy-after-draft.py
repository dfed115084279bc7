"""The paired lever run for a copy after a model draft (this folder's README, "A copy after the draft, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid), each variant with its own
engine over the one loaded pair. Variants:

- C: hybrid as it is now: after a model draft, a copy of what followed the draft's last three or
  four tokens earlier in the conversation, as long as its tokens are expected to pay for their
  verify rows;
- D: hybrid without such copies (a model draft alone), as before.

Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-03-copy-after-draft.py D C
The outputs are 2026-12-03-copy-after-draft-*.txt beside this file.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, decoded, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.drafters import HybridDrafter
from specdec_tui.runtime import build_engine, load_runtime

VARIANTS = sys.argv[1:] or ["D", "C"]
runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if isinstance(drafter, HybridDrafter) and name == "D":
        drafter.copy_policy = None
    copied = []
    if isinstance(drafter, HybridDrafter):
        propose = drafter.propose

        def counted(*args):  # type: ignore[no-untyped-def]
            draft = propose(*args)
            copied.append(drafter.copied)
            return draft

        drafter.propose = counted  # type: ignore[method-assign]
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, f"copies {sum(1 for c in copied if c)}, copied {sum(copied)}"


print_paired(interleaved(runtime, VARIANTS, run), [("C", "D")])
