"""The package's int8 head call on the loaded target, 1-4 rows, with 300 MB streamed between calls
(as a pass's layers would), the median of 22 of 25 rounds: the reference for
``2026-12-07-q6-head-prototype.c``.

Run: .venv/bin/python docs/benchmarks/2026-12-07-head-call.py   # output: appended to 2026-12-07-q6-head-prototype.txt
"""

import statistics
import time

import torch

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
head = runtime.pair.target.runner.head
print(type(head).__name__)
junk = torch.empty(300_000_000 // 4)
seconds: dict[int, list[float]] = {}
for _ in range(25):
    for rows in (1, 2, 3, 4):
        x = torch.randn(rows, 1536)
        junk.add_(1.0)
        start = time.perf_counter()
        head(x)
        seconds.setdefault(rows, []).append(time.perf_counter() - start)
for rows, times in seconds.items():
    print(f"rows {rows}: the package's head {1e3 * statistics.median(times[3:]):.2f} ms")
