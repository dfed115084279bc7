"""How far ahead a wide int8 pass of a few rows should fetch its weights into L2, timed pass against
pass (this folder's README, "The wide passes fetching farther, paired").

On an Intel processor with AVX-512 VNNI every int8 call of a step takes the wide passes, whose one
pass over a block pair fetched 2 KB ahead into L1 and 16 KB ahead into L2 before this change (32 KB
since). Run on a build with the patch beside this file (`2026-12-05-wide-far-prefetch.patch`),
which makes both distances a setting: the default target's whole pass over 1, 2, 3, 4, 5, 6 and 9 rows after CONTEXT tokens,
each distance pair in turn per row count (the order rotating from round to round), the median of
ROUNDS rounds less the first two, and each over the 2 KB / 16 KB of before.

Run (with the patch applied): .venv/bin/python docs/benchmarks/2026-12-05-wide-far-prefetch.py CONTEXT ROUNDS NEAR/FAR ...
e.g. `160 16 2048/16384 4096/32768 2048/32768 4096/65536` (the first pair is the baseline).
The outputs of 2026-12-05 (the Intel Xeon, 2 cores, four runs) are in 2026-12-05-wide-far-prefetch.txt beside this file.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

ROWS = [1, 2, 3, 4, 5, 6, 9]


@torch.inference_mode()
def main() -> None:
    context, rounds = int(sys.argv[1]), int(sys.argv[2])
    pairs = {name: tuple(int(part) for part in name.split("/")) for name in sys.argv[3:]}
    names, baseline = list(pairs), sys.argv[3]
    target = lean_forward(load_runtime(Settings()).pair.target.runner)
    target.reset()
    target.forward(list(range(1000, 1000 + context)), 1)
    times: dict[tuple[int, str], list[float]] = {}
    for round_ in range(rounds):
        for m in ROWS:
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                torch.ops.specdec.use_prefetch_distances(*pairs[name])
                start = time.perf_counter()
                target.forward(list(range(2000, 2000 + m)), m)
                times.setdefault((m, name), []).append(time.perf_counter() - start)
                target.crop(context)
    torch.ops.specdec.use_prefetch_distances(*pairs[baseline])
    for m in ROWS:
        base = statistics.median(times[m, baseline][2:])
        cells = [f"{name} {statistics.median(times[m, name][2:]) * 1000:.1f} ms "
                 f"({statistics.median(times[m, name][2:]) / base:.3f})" for name in names]
        print(f"{m} rows after {context}: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
