"""The paired run for short passes fetching less ahead on AVX2 (this folder's README, "Short passes' fetching, paired").

First the passes themselves on the loaded pair, after a context of 300 tokens: a draft token and
target passes over one, two and three rows (three rows fetch as before either way: a control), each
timed with the instruction set's choice (on AVX2: a lone int8 row fetches nothing ahead, two rows
and a lone int4 row only the near lines) and with them fetching ahead as longer passes do,
alternating pass by pass; the median of each and of the per-pass ratios. Then the suite,
interleaved per prompt in one process (the order rotating), all 28 prompts, greedy, 128 new tokens,
fresh caches, default settings, each variant with an engine of its own: `target` and `hybrid` as
the instruction set chooses, `fetching-target` and `fetching-hybrid` with short passes fetching as
before. Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-04-short-pass-prefetch.py
The output of 2026-12-04 (AMD EPYC Zen 3, 2 cores, AVX2) is 2026-12-04-short-pass-prefetch.txt beside
this file; 2026-12-04-lone-row-prefetch.txt is this script's first version's, an hour before, when
only a lone row fetched less (its passes: a draft token and target passes of one and five rows).
2026-12-06-short-pass-prefetch-amd-vnni-1.txt to -4.txt are its runs on a Zen 4 EPYC with AVX-512
VNNI (2026-12-06), on trial builds whose default fetched less on AMD processors (not kept): the
first with int8 and int4 short passes fetching less, the second to fourth with the int8 ones only.
"""

from __future__ import annotations

import statistics
import time

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.bench.steps import context_ids
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import Runner
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

PASSES = 60


def alternating_passes(runner: Runner, context: list[int], rows: int, passes: int) -> tuple[float, float, float]:
    """Median seconds of a pass over ``rows`` rows as the set chooses, fetching, and the median per-pass ratio."""
    runner.reset()
    runner.forward(context, 1)
    times: dict[bool | None, list[float]] = {None: [], True: []}
    for i in range(passes):
        for fetching in ((None, True) if i % 2 == 0 else (True, None)):
            with quantized_kernels.using_short_pass_prefetch(fetching):
                started = time.perf_counter()
                runner.forward(context[:rows], rows)
                times[fetching].append(time.perf_counter() - started)
            runner.crop(len(context))
    runner.reset()
    ratio = statistics.median(new / old for new, old in zip(times[None], times[True], strict=True))
    return statistics.median(times[None]), statistics.median(times[True]), ratio


runtime = load_runtime(Settings())
pair = runtime.pair
print(f"{quantized_kernels.instruction_set()} products; passes after 300 tokens, alternating, {PASSES} of each "
      "(the draft's 6 times as many)")
context = context_ids(pair, 300)
for label, runner, rows, passes in (("draft token", pair.draft.runner, 1, 6 * PASSES),
                                    ("target, 1 row", pair.target.runner, 1, PASSES),
                                    ("target, 2 rows", pair.target.runner, 2, PASSES),
                                    ("target, 3 rows", pair.target.runner, 3, PASSES)):
    chosen, fetching, ratio = alternating_passes(runner, context, rows, passes)
    print(f"{label:15s} as chosen {chosen * 1000:6.2f} ms, fetching {fetching * 1000:6.2f} ms, "
          f"per-pass ratio median {ratio:.3f}", flush=True)

VARIANTS = ["hybrid", "fetching-target", "fetching-hybrid"]
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    with quantized_kernels.using_short_pass_prefetch(True if name.startswith("fetching") else None):
        return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")


print_paired(interleaved(runtime, VARIANTS, run),
             [("hybrid", "fetching-hybrid"), ("fetching-hybrid", "fetching-target")])
