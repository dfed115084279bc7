"""Calls of up to N rows on the target's indices against the package's three: whether four-row
verify passes should read the indices too. This folder's README, "The target's Q4_K weights as
indexed int8, paired".

All 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens: target-only and
`hybrid` as the package runs them (calls of up to three rows on the indices), and `hybrid-N` with
calls of up to N rows on them, each on an engine of its own. The two forms give the same numbers bit
for bit, so every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-07-indexed-up-to.py [N]   (N = 4 unless given)
Outputs of 2026-12-07 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-07-indexed-up-to-4.txt, -4b.txt, -4c.txt (three runs of N = 4, the third a stop later);
-all-1.txt, -all-2.txt (N = 100000: every call, as a lean target reads them; -all-1 with a first build of
the many-row passes, see 2026-12-07-indices-only.py).
"""

from __future__ import annotations

import sys

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

if quantized_kernels.instruction_set() != "avx512_vnni":
    raise SystemExit("the indices are read on AVX-512 VNNI; this processor runs " + quantized_kernels.instruction_set())
UP_TO = int(sys.argv[1]) if len(sys.argv) > 1 else 4
VARIANT = f"hybrid-{UP_TO}"
runtime = load_runtime(Settings())
engines = {name: engine_with(runtime) for name in ("target", "hybrid", VARIANT)}


def run(ids: list[int], name: str) -> Reply:
    with quantized_kernels.using_indexed_int8_up_to(UP_TO if name == VARIANT else 3):
        return hybrid_reply(runtime, engines[name], ids, "hybrid" if name == VARIANT else name)


print_paired(interleaved(runtime, ["hybrid", VARIANT], run), [(VARIANT, "hybrid")])
