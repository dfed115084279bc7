"""The headline runs of one engine's numbers, pooled: per category, the median of every prompt's
paired ratio in every run (this folder's README, "A Zen 4 EPYC with AVX-512 VNNI (2026-12-06,
morning)", after the thirteenth suite run).

A single run's median per category moved by 0.10-0.25 between runs of the same numbers on the Zen 4;
the pooled median over all of them, with its quartiles, says where those numbers stand.

Run: .venv/bin/python docs/benchmarks/2026-12-08-pooled-runs.py CSV...
Output of 2026-12-08 (the nine suite runs and eight held-out runs since the indices, as the README
names them): 2026-12-08-pooled-runs.txt beside this file.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict

over_target: dict[str, list[float]] = defaultdict(list)
over_llama: dict[str, list[float]] = defaultdict(list)
for path in sys.argv[1:]:
    rates: dict[str, dict[str, float]] = defaultdict(dict)
    category = {}
    with open(path) as rows:
        for row in csv.DictReader(rows):
            rates[row["prompt_id"]][row["mode"]] = float(row["tokens_per_s"])
            category[row["prompt_id"]] = row["category"]
    for prompt, by_mode in rates.items():
        fastest_llama = max(rate for mode, rate in by_mode.items() if mode.startswith("llama.cpp"))
        over_target[category[prompt]].append(by_mode["hybrid"] / by_mode["target"])
        over_llama[category[prompt]].append(by_mode["hybrid"] / fastest_llama)
print(f"{len(sys.argv) - 1} runs")
for name in ("code-generation", "code-editing", "prose"):
    target, llama = over_target[name], over_llama[name]
    low, _, high = statistics.quantiles(target, n=4)
    low_llama, _, high_llama = statistics.quantiles(llama, n=4)
    print(f"{name}: hybrid / our target {statistics.median(target):.2f}x (quartiles {low:.2f}-{high:.2f}), "
          f"/ llama.cpp's fastest mode {statistics.median(llama):.2f}x ({low_llama:.2f}-{high_llama:.2f}); "
          f"{len(target)} replies")
