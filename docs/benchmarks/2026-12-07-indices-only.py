"""Every call of the target's Q4_K linears on their indices, a prompt's too, against the package's
three rows: whether the target can leave its int8 blocks unread, and so out of memory. This folder's
README, "The target's Q4_K weights as indexed int8, paired".

On the loaded pair after 300 tokens, the target's whole pass at 1 to 150 rows (150: a
prompt's), with every call on the indices (`indices`) and with calls of up to three rows on them, the
rest on the blocks (`package`), in turn per row count, the order rotating from round to round
(medians of 10 rounds less the first two). Both give the same numbers bit for bit.
The paired suite runs: `2026-12-07-indexed-up-to.py 100000`; the memory of a lean target:
`SPECDEC_MODELS__LEAN_TARGET=true .venv/bin/python docs/benchmarks/2026-12-06-long-reply-memory.py`.

Run: .venv/bin/python docs/benchmarks/2026-12-07-indices-only.py passes
Outputs of 2026-12-07 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-07-indices-only-passes-1.txt (a first
build: a call of more than 12 rows decoded each pair of blocks whole before its passes, and one of 8-12
rows took one pass), -passes-2.txt (this build).
"""

from __future__ import annotations

import sys

import torch
from paired_levers import lean_forward, pass_times, print_pass_times

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

if quantized_kernels.instruction_set() != "avx512_vnni":
    raise SystemExit("the indices are read on AVX-512 VNNI; this processor runs " + quantized_kernels.instruction_set())
EVERY_CALL = 1 << 30
if sys.argv[1:] != ["passes"]:
    raise SystemExit("usage: 2026-12-07-indices-only.py passes")
target = lean_forward(load_runtime(Settings()).pair.target.runner)
variants = {"indices": lambda: torch.ops.specdec.use_indexed_int8_up_to(EVERY_CALL),
            "package": lambda: torch.ops.specdec.use_indexed_int8_up_to(3)}
times = pass_times(target, 300, [1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 16, 40, 150], variants, 10)
torch.ops.specdec.use_indexed_int8_up_to(3)
print_pass_times(times, 300, "package")
