"""A verify pass of a few rows on 512-bit registers, on an Intel Xeon (this folder's README, "Short
passes on 512-bit registers, on the Xeon (measured, not built)").

On AVX-512 VNNI, int8 calls of 32 rows or more take the wide passes (two weight blocks a step, one
512-bit vpdpbusd for a block's 16 columns of a row); fewer rows take the 256-bit passes, which also
fetch the weights far ahead into L2. The threshold of 32 was timed on an AMD EPYC, whose 512-bit
instructions run as two 256-bit halves. With the patch beside it applied (``git apply
docs/benchmarks/2026-12-05-wide-short-passes.patch`` to commit 1c572f2, the one before the
change this measurement led to: the threshold and a far fetch for the wide passes become settings,
both off by default), this times a target pass of M rows after 160 tokens in
three ways, 15 rounds, the order rotating, the first round left out: the 256-bit passes (main's),
the wide passes, and the wide passes fetching far ahead as the 256-bit ones do. The logits are
checked equal every time (the same integer sums either way).

Run: .venv/bin/python docs/benchmarks/2026-12-05-wide-short-passes.py [ROWS, e.g. 1,2,3,5,7,9,12]
The outputs of 2026-12-05 (the Xeon) are in 2026-12-05-wide-short-passes.txt beside this file.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

ROUNDS = 15
CONTEXT = 160
#: name: (the fewest rows taking the wide passes, whether those fetch far ahead)
VARIANTS = {"256-bit": (32, False), "wide": (1, False), "wide, far": (1, True)}


def use(variant: str) -> None:
    wide_from, far = VARIANTS[variant]
    torch.ops.specdec.use_wide_int8_from(wide_from)
    torch.ops.specdec.use_wide_far_prefetch(far)


@torch.inference_mode()
def main() -> None:
    rows = [int(m) for m in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 2, 3, 5, 7, 9, 12]
    runtime = load_runtime(Settings())
    if not hasattr(torch.ops.specdec, "use_wide_far_prefetch"):
        raise SystemExit("apply docs/benchmarks/2026-12-05-wide-short-passes.patch first")
    print("instruction set:", torch.ops.specdec.instruction_set())
    runner = lean_forward(runtime.pair.target.runner)
    runner.reset()
    runner.forward(list(range(1000, 1000 + CONTEXT)), 1)
    names = list(VARIANTS)
    times: dict[tuple[int, str], list[float]] = {(m, name): [] for m in rows for name in names}
    for round_ in range(ROUNDS):
        for m in rows:
            logits = {}
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                use(name)
                start = time.perf_counter()
                logits[name] = runner.forward(list(range(2000, 2000 + m)), m)
                times[m, name].append(time.perf_counter() - start)
                runner.crop(CONTEXT)
            assert all(torch.equal(logits["256-bit"], other) for other in logits.values())
    use("256-bit")
    medians = {key: statistics.median(seconds[1:]) for key, seconds in times.items()}
    one_row = medians[rows[0], "256-bit"]
    for m in rows:
        line = ", ".join(f"{name} {medians[m, name] * 1000:.1f} ms (v {medians[m, name] / one_row:.2f})" for name in names)
        print(f"{m} rows: {line} | wide / 256-bit {medians[m, 'wide'] / medians[m, '256-bit']:.3f}, "
              f"wide, far / 256-bit {medians[m, 'wide, far'] / medians[m, '256-bit']:.3f}")


if __name__ == "__main__":
    main()
