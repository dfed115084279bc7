"""The attention's weighted values summed on 512-bit registers against 256-bit ones, in whole target
passes timed in turn in one process (this folder's README, "The attention's value sums on 512-bit
registers").

Since 2026-12-05 the attention sums its values sixteen lanes at a time where the chosen instruction
set has 512-bit registers; each lane adds in the same order, so the numbers are the same. Run on a
build with the patch beside this file (`2026-12-05-wide-value-sums.patch`, applies to e79af12),
which makes the choice a setting: the default target's whole pass over 1, 2, 3, 5 and 9 rows after
each CONTEXT, both sums in turn per row count (the order rotating from round to round), the median
of ROUNDS rounds less the first two, the 512-bit sums over the 256-bit ones.

Run (with the patch applied): .venv/bin/python docs/benchmarks/2026-12-05-wide-value-sums.py ROUNDS CONTEXT ...
e.g. `16 160 600 1000`. The outputs of 2026-12-05 (the Intel Xeon, 2 cores) are in
2026-12-05-wide-value-sums.txt beside this file.
"""

from __future__ import annotations

import sys

import torch
from paired_levers import lean_forward, pass_times, print_pass_times

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

ROWS = [1, 2, 3, 5, 9]


@torch.inference_mode()
def main() -> None:
    rounds, contexts = int(sys.argv[1]), [int(arg) for arg in sys.argv[2:]]
    target = lean_forward(load_runtime(Settings()).pair.target.runner)
    variants = {"256-bit": lambda: torch.ops.specdec.use_wide_value_sums(0),
                "512-bit": lambda: torch.ops.specdec.use_wide_value_sums(1)}
    for context in contexts:
        print_pass_times(pass_times(target, context, ROWS, variants, rounds), context, "256-bit")
    torch.ops.specdec.use_wide_value_sums(-1)


if __name__ == "__main__":
    main()
