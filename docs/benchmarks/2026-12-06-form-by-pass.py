"""The form of the target's Q4_K linears (4-bit indices or int8 blocks) for a verify pass of four to
eight rows chosen from the measured time of whole passes, against the package's rule (calls of up to
three rows on the indices): this folder's README, "The form a call reads, by measured speed".

The choice lives in this script only: it wraps the target's forward. Per number of rows from 4 to 8,
an average of each form's whole-pass milliseconds (each new pass a quarter); a pass reads the faster
form, and the other now and then (one pass in 8 while the two are within 10% of each other, in 32
within 30%, else in 128), so that a change of the memory's rate shows. Passes of other row counts
read as the package's rule says.

All 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens, fresh caches, each
variant with an engine of its own: `target` and `hybrid` with the choice, `rule-target` and
`rule-hybrid` without; every reply asserted equal to target-only's (both forms give the same
numbers). Then, per number of rows, the passes on each form and its average.

Run: .venv/bin/python docs/benchmarks/2026-12-06-form-by-pass.py
Output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-06-form-by-pass.txt
"""

from __future__ import annotations

import time

from paired_levers import Reply, engine_with, hybrid_reply, interleaved, lean_forward, print_paired

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

if quantized_kernels.instruction_set() != "avx512_vnni":
    raise SystemExit("the indices are read on AVX-512 VNNI; this processor runs " + quantized_kernels.instruction_set())
CHOSEN_ROWS = range(4, 9)
runtime = load_runtime(Settings())
target = lean_forward(runtime.pair.target.runner)
forward = type(target).forward
milliseconds = {(rows, form): 0.0 for rows in CHOSEN_ROWS for form in ("indices", "blocks")}
passes = {key: 0 for key in milliseconds}
choosing = [False]


def chosen_form(rows: int) -> str:
    indices, blocks = milliseconds[rows, "indices"], milliseconds[rows, "blocks"]
    if not indices or not blocks:
        return "indices" if not indices else "blocks"
    faster, slower = ("indices", "blocks") if indices <= blocks else ("blocks", "indices")
    ratio = max(indices, blocks) / min(indices, blocks)
    every = 8 if ratio < 1.1 else 32 if ratio < 1.3 else 128
    count = passes[rows, "indices"] + passes[rows, "blocks"]
    return slower if count % every == every - 1 else faster


def timed_forward(model: object, ids: list[int], n_logits: int, branches: tuple = ()) -> object:
    rows = len(ids) + len(branches)
    if model is not target or not choosing[0] or rows not in CHOSEN_ROWS:
        return forward(model, ids, n_logits, branches)
    form = chosen_form(rows)
    with quantized_kernels.using_indexed_int8_up_to(rows if form == "indices" else 3):
        start = time.perf_counter()
        out = forward(model, ids, n_logits, branches)
        spent = (time.perf_counter() - start) * 1000
    before = milliseconds[rows, form]
    milliseconds[rows, form] = spent if not before else before + (spent - before) / 4
    passes[rows, form] += 1
    return out


type(target).forward = timed_forward
VARIANTS = ["hybrid", "rule-target", "rule-hybrid"]
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    choosing[0] = not name.startswith("rule")
    try:
        return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")
    finally:
        choosing[0] = False


print_paired(interleaved(runtime, VARIANTS, run), [("hybrid", "rule-hybrid")])
for rows in CHOSEN_ROWS:
    print(f"{rows} rows: " + ", ".join(f"{form} {passes[rows, form]} passes, {milliseconds[rows, form]:.1f} ms"
                                      for form in ("indices", "blocks")))
