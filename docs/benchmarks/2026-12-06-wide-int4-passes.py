"""A step's int4 calls on AVX-512 VNNI's wide passes, now fetching far ahead, and from how many rows
calls take them: this folder's README, "Int4 steps on the wide passes, fetching far (paired)".

`passes TARGET`: on the loaded pair with the TARGET precision (int8, the default, or int4) after 300
tokens, whole passes of the target and of the int4 draft at 1, 2, 3, 5, 6 and 9 rows with int4 calls
taking the wide passes from two rows and from six (the default), the variants in turn per row
count, their order rotating from round to round (medians of 16 rounds less the first two).
`suite TARGET`: all 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens,
fresh caches, each variant with an engine of its own: `target` and `hybrid` with the wide int4
passes from two rows, `six-target` and `six-hybrid` from six; every reply asserted equal to
target-only's. `suite-before TARGET [FROM]`: `target` and `hybrid` with the wide int4 passes from
FROM rows (default six, the package's), fetching far, against `before-target` and `before-hybrid`
as the package was before (from six rows, without the far fetches); needs the trial's switch for
the fetches, `git apply docs/benchmarks/2026-12-06-wide-int4-far.patch`.

`build TARGET [DIR]`: whole passes of the target and the draft at those rows under the kernels built
from DIR's sources (a copy of another commit's `quantized_kernels.cpp` and `quantized_products.inc`;
the package's own without DIR), one line each, to run in alternation with another build.

Run: .venv/bin/python docs/benchmarks/2026-12-06-wide-int4-passes.py passes|build|suite|suite-before int8|int4 [DIR|FROM]
Outputs of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI) beside this file, 2026-12-06-wide-int4-passes-*.txt:
-passes-int4.txt and -suite-int4.txt (made while the default was two rows), -builds-int4.txt
(09b591e's sources and the package's, three rounds), -before-int4.txt and -before-int8.txt (as
committed), -before-int4-from-two.txt and -before-int8-from-two.txt (`suite-before TARGET 2`: the
new passes from two rows, two runs on int8).
"""

from __future__ import annotations

import sys
from pathlib import Path

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

if sys.argv[1] == "build" and len(sys.argv) > 3:
    quantized_kernels.SOURCE = Path(sys.argv[3]) / quantized_kernels.SOURCE.name
    quantized_kernels.PRODUCTS_SOURCE = Path(sys.argv[3]) / quantized_kernels.PRODUCTS_SOURCE.name
if quantized_kernels.instruction_set() != "avx512_vnni":
    raise SystemExit("the wide passes are AVX-512 VNNI's; this processor runs " + quantized_kernels.instruction_set())
runtime = load_runtime(Settings.model_validate({"models": {"precision": sys.argv[2]}}))
if sys.argv[1] == "passes":
    variants = {"from two rows": lambda: torch.ops.specdec.use_wide_int4_passes_from(2),
                "from six": lambda: torch.ops.specdec.use_wide_int4_passes_from(6)}  # the default
    for role in ("target", "draft"):
        model = lean_forward(getattr(runtime.pair, role).runner)
        times = pass_times(model, 300, [1, 2, 3, 5, 6, 9], variants, 16)
        torch.ops.specdec.use_wide_int4_passes_from(6)
        print(f"{role} ({sys.argv[2] if role == 'target' else 'int4'}):")
        print_pass_times(times, 300, "from six")
elif sys.argv[1] == "build":
    build = sys.argv[3] if len(sys.argv) > 3 else "the package's"
    for role in ("target", "draft"):
        model = lean_forward(getattr(runtime.pair, role).runner)
        times = pass_times(model, 300, [1, 2, 3, 5, 6, 9], {"as built": lambda: None}, 12)
        print(f"{build} build, {role}, ms at 1 / 2 / 3 / 5 / 6 / 9 rows: "
              + " / ".join(f"{times[m, 'as built'] * 1000:.1f}" for m in [1, 2, 3, 5, 6, 9]), flush=True)
elif sys.argv[1] == "suite":
    VARIANTS = ["hybrid", "six-target", "six-hybrid"]
    engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}

    def run(ids: list[int], name: str) -> Reply:
        with quantized_kernels.using_wide_int4_passes_from(6 if name.startswith("six") else 2):
            return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")

    print_paired(interleaved(runtime, VARIANTS, run), [("hybrid", "six-hybrid")])
else:
    if not hasattr(torch.ops.specdec, "use_wide_int4_far"):
        raise SystemExit("suite-before needs the trial's switch: git apply docs/benchmarks/2026-12-06-wide-int4-far.patch")
    FROM = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    VARIANTS = ["hybrid", "before-target", "before-hybrid"]
    engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}

    def run(ids: list[int], name: str) -> Reply:
        before = name.startswith("before")
        torch.ops.specdec.use_wide_int4_far(0 if before else 1)
        try:
            with quantized_kernels.using_wide_int4_passes_from(6 if before else FROM):
                return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")
        finally:
            torch.ops.specdec.use_wide_int4_far(1)

    print_paired(interleaved(runtime, VARIANTS, run), [("hybrid", "before-hybrid")])
