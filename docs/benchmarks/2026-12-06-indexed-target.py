"""The target's Q4_K linears read as indices into int8 tables by calls of a few rows, against the same
int8 weights read as blocks by every call: this folder's README, "The target's Q4_K weights as
indexed int8, paired".

`passes [UP_TO]`: on the loaded pair after 300 tokens, the target's whole pass at 1, 2, 3, 4, 5, 6, 7
and 9 rows with calls of up to UP_TO rows (default 3, the package's) reading the indices and with
every call reading the blocks, in turn per row count, the order rotating from round to round
(medians of 14 rounds less the first two).
`suite [UP_TO]`: all 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens,
fresh caches, each variant with an engine of its own: `target` and `hybrid` with calls of up to
UP_TO rows reading the indices, `blocks-target` and `blocks-hybrid` with none; every reply asserted
equal to target-only's (the two ways give the same numbers bit for bit).
`rows [UP_TO]`: `hybrid` on the ten code-generation prompts with calls of up to UP_TO rows reading the
indices and with none, interleaved per prompt, each with an engine of its own: the seconds in the
target's and the draft's passes, and the target's passes' count and median time by rows.

Run: .venv/bin/python docs/benchmarks/2026-12-06-indexed-target.py passes|suite|rows [UP_TO]
Outputs of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI) beside this file: 2026-12-06-indexed-target-passes.txt
(`passes 6`), -suite-6.txt (`suite 6`), -suite-3.txt and -suite-3b.txt (`suite 3`, two runs), -rows.txt
(`rows 3`).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict

import torch
from paired_levers import (
    Reply,
    decoded,
    engine_with,
    hybrid_reply,
    interleaved,
    lean_forward,
    pass_times,
    print_paired,
    print_pass_times,
)

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.models.fast_llama import LAYER_LINEARS
from specdec_tui.models.precision import IndexedInt8Linear
from specdec_tui.runtime import load_runtime

if quantized_kernels.instruction_set() != "avx512_vnni":
    raise SystemExit("the indices are read on AVX-512 VNNI; this processor runs " + quantized_kernels.instruction_set())
UP_TO = int(sys.argv[2]) if len(sys.argv) > 2 else 3
runtime = load_runtime(Settings())
target = lean_forward(runtime.pair.target.runner)
indexed = sum(isinstance(getattr(layer, name), IndexedInt8Linear) for layer in target.layers for name in LAYER_LINEARS)
print(f"the target holds {indexed} indexed int8 linears; calls of up to {UP_TO} rows read their indices", flush=True)
if sys.argv[1] == "passes":
    variants = {"indices": lambda: torch.ops.specdec.use_indexed_int8_up_to(UP_TO),
                "blocks": lambda: torch.ops.specdec.use_indexed_int8_up_to(0)}
    times = pass_times(target, 300, [1, 2, 3, 4, 5, 6, 7, 9], variants, 14)
    torch.ops.specdec.use_indexed_int8_up_to(3)
    print_pass_times(times, 300, "blocks")
elif sys.argv[1] == "rows":
    draft = lean_forward(runtime.pair.draft.runner)
    forward = type(target).forward
    seconds: dict[tuple[int, str, int], list[float]] = defaultdict(list)
    up_to = {"indices": UP_TO, "blocks": 0}
    variant = "indices"

    def timed(model: object, ids: list[int], n_logits: int, branches: tuple = ()) -> torch.Tensor:
        start = time.perf_counter()
        out = forward(model, ids, n_logits, branches)
        role = "target" if model is target else "draft"
        seconds[variant, role, len(ids) + len(branches)].append(time.perf_counter() - start)
        return out

    type(target).forward = timed
    engines = {name: engine_with(runtime) for name in up_to}
    params = runtime.params(max_new_tokens=128)
    prompts = [item for item in load_suite(default_suite_path()) if item.category == "code-generation"]
    for i, item in enumerate([None, *prompts]):  # the first a warm-up
        ids = runtime.prompt_ids(item.messages if item else [{"role": "user", "content": "Say hi."}])
        for variant in (list(up_to) if i % 2 else list(reversed(up_to))):
            with quantized_kernels.using_indexed_int8_up_to(up_to[variant]):
                decoded(engines[variant], ids, params, engines[variant].drafter("hybrid", params))
        if item is None:
            seconds.clear()
    for name in up_to:
        spent = {role: sum(sum(v) for (n, r, _), v in seconds.items() if n == name and r == role)
                 for role in ("target", "draft")}
        print(f"{name}: target passes {spent['target']:.2f} s, draft passes {spent['draft']:.2f} s")
    for m in sorted({m for n, r, m in seconds if r == "target"}):
        cells = [f"{name} {len(seconds[name, 'target', m])} passes, median "
                 f"{statistics.median(seconds[name, 'target', m]) * 1000:.1f} ms"
                 for name in up_to if seconds[name, "target", m]]
        print(f"{m} rows: " + "; ".join(cells))
else:
    VARIANTS = ["hybrid", "blocks-target", "blocks-hybrid"]
    engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}

    def run(ids: list[int], name: str) -> Reply:
        with quantized_kernels.using_indexed_int8_up_to(0 if name.startswith("blocks") else UP_TO):
            return hybrid_reply(runtime, engines[name], ids, "target" if name.endswith("target") else "hybrid")

    print_paired(interleaved(runtime, VARIANTS, run), [("hybrid", "blocks-hybrid")])
