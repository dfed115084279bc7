"""How many rows `hybrid`'s target passes take, on the suite's prompts of one category, with the
short passes as the instruction set chooses and with every pass fetching ahead (this folder's
README, "The same on a Zen 4 EPYC with AVX-512 VNNI (2026-12-06, not kept)").

Int8 passes of one or two rows are the only ones whose fetching the instruction set's choice
changes, so a `hybrid` reply can only be as much faster or slower from it as it runs such passes.
For each prompt of the category (the first N, default all), a `hybrid` reply with each setting,
alternating which goes first, greedy, 128 new tokens, each setting with an engine of its own: the
replies' tokens/s, their target passes after the prompt counted by rows with each count's median
seconds, and the seconds spent verifying and drafting in all.

Run: .venv/bin/python docs/benchmarks/2026-12-06-verify-rows.py prose [N]
The output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI) is 2026-12-06-verify-rows.txt beside
this file, made on the trial build whose int8 passes of one or two rows fetched less on AMD
processors (not kept). On the package's own build the two settings are the same on a host with
AVX-512 VNNI, and differ on AVX2.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from paired_levers import engine_with, hybrid_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime


class LoggedCost(VerifyCost):
    """The package's table, keeping every pass it learns from."""

    def __init__(self) -> None:
        super().__init__()
        self.passes: list[StepRecord] = []

    def observe(self, record: StepRecord) -> None:
        self.passes.append(record)
        super().observe(record)


category = sys.argv[1]
items = [item for item in load_suite(default_suite_path()) if item.category.startswith(category)]
items = items[: int(sys.argv[2])] if len(sys.argv) > 2 else items
runtime = load_runtime(Settings())
SETTINGS = {"as chosen": None, "fetching": True}
engines = {name: engine_with(runtime, LoggedCost) for name in SETTINGS}
warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
for name, fetching in SETTINGS.items():
    with quantized_kernels.using_short_pass_prefetch(fetching):
        hybrid_reply(runtime, engines[name], warm, "hybrid")
by_rows: dict[str, dict[int, list[float]]] = {name: defaultdict(list) for name in SETTINGS}
seconds = {name: [0.0, 0.0] for name in SETTINGS}
speeds: dict[str, list[float]] = {name: [] for name in SETTINGS}
for i, item in enumerate(items):
    ids = runtime.prompt_ids(item.messages)
    for name in list(SETTINGS)[i % 2 :] + list(SETTINGS)[: i % 2]:
        table = engines[name].decoder.verify_cost
        assert isinstance(table, LoggedCost)
        table.passes.clear()
        with quantized_kernels.using_short_pass_prefetch(SETTINGS[name]):
            _, summary, _ = hybrid_reply(runtime, engines[name], ids, "hybrid")
        speeds[name].append(summary.tokens_per_s)
        for record in table.passes[1:]:  # the first pass reads the prompt
            by_rows[name][record.rows].append(record.verify_s)
            seconds[name][0] += record.verify_s
            seconds[name][1] += record.draft_s
print(f"{quantized_kernels.instruction_set()} products; `hybrid` on {len(items)} {category} prompts")
for name in SETTINGS:
    passes = sum(len(times) for times in by_rows[name].values())
    print(f"{name}: tokens/s {' '.join(f'{speed:.1f}' for speed in speeds[name])}; "
          f"verifying {seconds[name][0]:.2f} s, drafting {seconds[name][1]:.2f} s; {passes} passes by rows:")
    print("  " + "; ".join(f"{rows}: {len(times)} x {statistics.median(times) * 1000:.0f} ms"
                           for rows, times in sorted(by_rows[name].items())))
paired = [new / old for new, old in zip(speeds["as chosen"], speeds["fetching"], strict=True)]
print(f"as chosen / fetching, tokens/s: paired median {statistics.median(paired):.3f}, "
      f"min {min(paired):.3f}, max {max(paired):.3f}")
