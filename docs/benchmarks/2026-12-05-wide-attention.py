"""The attention on 512-bit registers against 256-bit ones, in whole target passes timed in turn in
one process (this folder's README, "The attention on 512-bit registers").

Since 2026-12-05 (late night) the attention sums its weighted values sixteen lanes at a time where
the chosen instruction set has 512-bit registers (e79af12), and takes its scores there too
(015f6fb); every lane adds in the same order, so the numbers are the same. Run on a build with one
of the patches beside this file, which make the choice a setting: `2026-12-05-wide-value-sums.patch`
(applies to e79af12; the setting `use_wide_value_sums`) or `2026-12-05-wide-attention.patch`
(applies to 015f6fb; `use_wide_attention`). The default target's whole pass over 1, 2, 3, 5 and 9
rows after each CONTEXT, both forms in turn per row count (the order rotating from round to round),
the median of ROUNDS rounds less the first two, the 512-bit form over the 256-bit one.

Run (with a patch applied): .venv/bin/python docs/benchmarks/2026-12-05-wide-attention.py SETTING ROUNDS CONTEXT ...
e.g. `use_wide_attention 16 160 600 1000`. The outputs of 2026-12-05 (the Intel Xeon, 2 cores) are
in 2026-12-05-wide-value-sums.txt and 2026-12-05-wide-attention.txt beside this file.
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
    rounds, contexts = int(sys.argv[2]), [int(arg) for arg in sys.argv[3:]]
    target = lean_forward(load_runtime(Settings()).pair.target.runner)
    setting = getattr(torch.ops.specdec, sys.argv[1])  # the kernels are loaded by now
    variants = {"256-bit": lambda: setting(0), "512-bit": lambda: setting(1)}
    for context in contexts:
        print_pass_times(pass_times(target, context, ROWS, variants, rounds), context, "256-bit")
    setting(-1)


if __name__ == "__main__":
    main()
