"""The paired lever run for the most tokens a model draft may take, K = 8 (the default since this
run) against 6 (the default before it) (this folder's README, "A longer model draft, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings but K (given to every variant), each variant
and target-only with an engine of its own over the one loaded pair. Two engines of each K run side
by side, so the spread between identical engines (their draft lengths settle from their own
histories) is measured in the same run as the change. Variants: A, B at K = 6; W, X at K = 8. Every
reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-04-draft-k8.py A W B X
The runs together, per prompt the mean of W and X over the mean of A and B:
     .venv/bin/python docs/benchmarks/2026-12-04-draft-k8.py --combine docs/benchmarks/2026-12-04-draft-k8-*.txt
The outputs of 2026-12-04 (AMD EPYC Zen 3, 2 cores, AVX2), orders A W B X, W A X B and X B W A, are
2026-12-04-draft-k8-1.txt, -2.txt and -3.txt beside this file.
"""

from __future__ import annotations

import sys

from paired_levers import Reply, combine, decoded, engine_with, interleaved, print_paired, two_engine_pairs

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

if sys.argv[1:2] == ["--combine"]:
    combine(sys.argv[2:])
    sys.exit()

K = {"A": 6, "B": 6, "W": 8, "X": 8}
VARIANTS = [name for name in sys.argv[1:] if name in K] or ["A", "W", "B", "X"]

runtime = load_runtime(Settings())
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[name]
    params = runtime.params(max_new_tokens=128, **({"k": K[name]} if name in K else {}))
    drafter = engine.drafter("hybrid", params) if name in K else None
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, ""


old, new = [v for v in VARIANTS if K[v] == 6], [v for v in VARIANTS if K[v] == 8]
print_paired(interleaved(runtime, VARIANTS, run), two_engine_pairs(new, old))
