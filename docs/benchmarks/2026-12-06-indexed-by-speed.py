"""Calls of a few rows reading whichever form of the target's Q4_K linears (the 4-bit indices or the
int8 blocks) was measured faster at their number of rows (`by-speed`), against a fixed rule: calls of
up to N rows on the indices, longer ones on the blocks (`up-to-N`; N = 0: every call the blocks, as
hosts without AVX-512 VNNI read them before): this folder's README, "The form a call reads, by
measured speed".

`passes [SET]`: on the loaded pair after 300 tokens, the target's whole pass at 1, 2, 3, 4, 5, 6, 8
and 10 rows by speed, up to 3 rows on the indices, and every call on the blocks, in turn per row
count, the order rotating from round to round (medians of 14 rounds less the first two).
`suite N [SET]`: all 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens,
fresh caches, each variant with an engine of its own: `target` and `hybrid` by speed, `up-to-N-target`
and `up-to-N-hybrid`; every reply asserted equal to target-only's (both forms give the same numbers
bit for bit).
Either mode then prints what the choice measured: per shape of linear and number of rows, the calls
on the indices / the blocks and each form's recent nanoseconds a weight. SET runs the products with
that instruction set (`avx2`, say) instead of the fastest this processor has.

Not on main: the choice is in 2026-12-06-indexed-by-speed.patch beside this file (against main at
94848b7: the choice, the indexed pass on 256-bit registers and their tests); apply it first
(`git apply docs/benchmarks/2026-12-06-indexed-by-speed.patch`), then
Run: .venv/bin/python docs/benchmarks/2026-12-06-indexed-by-speed.py passes|suite N [SET]
Outputs of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI) beside this file: -suite-3-first.txt (`suite
3` with the first build of the choice: one estimate per number of rows over every shape, one call in
16 on the other form; its script printed the estimates per number of rows), -suite-3.txt (`suite 3`).
"""

from __future__ import annotations

import sys

import torch
from paired_levers import (
    Reply,
    engine_with,
    hybrid_reply,
    interleaved,
    lean_forward,
    pass_times,
    print_paired,
    print_pass_times,
)

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

MODE = sys.argv[1]
ARGS = sys.argv[2:]
SET = ARGS.pop() if ARGS and not ARGS[-1].isdigit() else quantized_kernels.instruction_set()
runtime = load_runtime(Settings())


def print_form_costs() -> None:
    for (inputs, outputs), by_rows in quantized_kernels.indexed_form_costs().items():
        print(f"{inputs} inputs x {outputs} outputs: " + "; ".join(
            f"{rows} rows {on_indices}/{on_blocks} calls, ns a weight {indices:.4f}/{blocks:.4f}"
            for rows, (indices, blocks, on_indices, on_blocks) in by_rows.items()))


with quantized_kernels.using_instruction_set(SET):
    print(f"products on {SET}", flush=True)
    if MODE == "passes":
        target = lean_forward(runtime.pair.target.runner)
        variants = {name: (lambda rows=rows: torch.ops.specdec.use_indexed_int8_up_to(rows))
                    for name, rows in {"by-speed": -1, "up-to-3": 3, "blocks": 0}.items()}
        times = pass_times(target, 300, [1, 2, 3, 4, 5, 6, 8, 10], variants, 14)
        torch.ops.specdec.use_indexed_int8_up_to(-1)
        print_pass_times(times, 300, "blocks")
    else:
        fixed = int(ARGS[0])
        variants = ["hybrid", f"up-to-{fixed}-target", f"up-to-{fixed}-hybrid"]
        engines = {name: engine_with(runtime) for name in ["target", *variants]}

        def run(ids: list[int], name: str) -> Reply:
            with quantized_kernels.using_indexed_int8_up_to(fixed if name.startswith("up-to") else -1):
                return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")

        print_paired(interleaved(runtime, variants, run), [("hybrid", f"up-to-{fixed}-hybrid")])
    print_form_costs()
