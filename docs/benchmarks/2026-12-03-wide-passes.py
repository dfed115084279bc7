"""The paired lever run of 2026-12-03 for the 512-bit passes of calls of many rows, a prompt's
(this folder's README, "A prompt's passes, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid). Every reply is timed from
its prompt, so the prompt's passes (both models' for hybrid, the target's for target-only) are part
of its tokens per second. Variants:

- W: hybrid with the wide passes (the default now): calls of more rows than a 256-bit pass takes
  run on AVX-512 VNNI's 512-bit registers, two blocks of weights at a time;
- N: hybrid without them, as before;
- Tn: target-only without them (target-only itself runs with them).

The numbers are the same either way (exact integer sums); the script asserts every reply equal to
target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-03-wide-passes.py N W Tn
With the int4 target: SPECDEC_MODELS__PRECISION=int4 .venv/bin/python docs/benchmarks/2026-12-03-wide-passes.py N W
The outputs of that day are 2026-12-03-wide-passes-*.txt beside this file (-int4.txt the int4 target's).
"""

from __future__ import annotations

import sys

from paired_levers import Reply, decoded, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import build_engine, load_runtime

VARIANTS = sys.argv[1:] or ["N", "W", "Tn"]
WIDE = {"target": True, "W": True, "N": False, "Tn": False}
if "avx512_vnni" not in quantized_kernels.instruction_sets():
    sys.exit("this host has no AVX-512 VNNI: no wide passes to compare")
runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    params = runtime.params(max_new_tokens=128)
    drafter = None if name in ("target", "Tn") else engine.drafter("hybrid", params)
    with quantized_kernels.using_wide_passes(WIDE[name]):
        event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, f"prompt {len(ids)} tokens"


pairs = [(name, "N") for name in VARIANTS if name not in ("N", "Tn")]
print_paired(interleaved(runtime, VARIANTS, run), pairs)
