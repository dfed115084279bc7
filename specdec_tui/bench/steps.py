"""specdec-bench steps: what one target pass costs by the rows it verifies, and what a draft token costs.

A K-token draft is checked in one target pass over K + 1 rows, so speculation pays when that pass
costs little more than a single-row one. ``v(M) = cost(M) / cost(1)`` is that verify curve, and
``c = draft token / target pass`` is what each drafted token costs next to it; both decide how far
ahead it pays to draft. The context is read once per length; then every row count is timed in turn,
round after round (so that a slow minute slows them all alike), the cache cropped back after each
pass, and each figure is the median of its rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import torch

from specdec_tui.bench.cli import list_of
from specdec_tui.config import add_settings_flags, settings_or_exit
from specdec_tui.engine.cached_model import Runner
from specdec_tui.models import quantized_kernels
from specdec_tui.models.errors import ModelError
from specdec_tui.models.loader import ModelPair
from specdec_tui.runtime import load_pair_for
from specdec_tui.terminal_progress import TerminalProgress

#: The instruction-set flags that decide which kernels a host can run.
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_int8")
FILLER = "def merge_sorted(left, right):\n    result = []\n    while left and right:\n"


@dataclass(frozen=True)
class StepCosts:
    contexts: tuple[int, ...]
    rows: tuple[int, ...]
    #: (context, rows) -> seconds of one target pass.
    target: dict[tuple[int, int], float]
    #: context -> seconds of one draft token (None: no draft model).
    draft: dict[int, float] | None

    def v(self, context: int, rows: int) -> float:
        return self.target[context, rows] / self.target[context, 1]

    def c(self, context: int) -> float | None:
        return self.draft[context] / self.target[context, 1] if self.draft else None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, list[str]]:
    """The processor's name and which of ``ISA_FLAGS`` it has."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown", []
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return name, [flag for flag in ISA_FLAGS if flag in flags]


def context_ids(pair: ModelPair, length: int) -> list[int]:
    """``length`` token ids of code-like text, as a prompt would be."""
    tokens = pair.target.tokenizer.encode(FILLER)
    return (tokens * (length // len(tokens) + 1))[:length]


def pass_seconds(runner: Runner, context: Sequence[int], rows: Sequence[int], min_time: float) -> dict[int, float]:
    """Median seconds of one pass over M new tokens (logits for each) after ``context``, for each M in ``rows``."""
    runner.reset()
    runner.forward(list(context), 1)
    times: dict[int, list[float]] = {m: [] for m in rows}

    def one_pass(m: int) -> float:
        started = time.perf_counter()
        runner.forward(list(context[:m]), m)
        elapsed = time.perf_counter() - started
        runner.crop(len(context))
        return elapsed

    for m in rows:  # warm: first calls of a shape allocate
        one_pass(m)
    while len(times[rows[0]]) < 3 or sum(map(sum, times.values())) < min_time * len(rows):
        for m in rows:
            times[m].append(one_pass(m))
    runner.reset()
    return {m: median(seconds) for m, seconds in times.items()}


def measure(pair: ModelPair, contexts: Sequence[int], rows: Sequence[int], min_time: float = 1.0) -> StepCosts:
    rows = tuple(sorted({1, *rows}))
    target = {(n, m): seconds for n in contexts
              for m, seconds in pass_seconds(pair.target.runner, context_ids(pair, n), rows, min_time).items()}
    draft = ({n: pass_seconds(pair.draft.runner, context_ids(pair, n), (1,), min_time)[1] for n in contexts}
             if pair.draft is not None else None)
    return StepCosts(tuple(contexts), rows, target, draft)


def format_costs(costs: StepCosts) -> str:
    header = "| rows M |" + "".join(f" ctx {n}: ms | v(M) |" for n in costs.contexts)
    lines = [header, "|---|" + "---|---|" * len(costs.contexts)]
    for m in costs.rows:
        lines.append(f"| {m} |" + "".join(f" {1000 * costs.target[n, m]:.1f} | {costs.v(n, m):.2f} |"
                                          for n in costs.contexts))
    if costs.draft is not None:
        lines.append("")
        lines += [f"draft token after {n}: {1000 * costs.draft[n]:.1f} ms, c = draft / target = {costs.c(n):.2f}"
                  for n in costs.contexts]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specdec-bench steps", description=__doc__)
    parser.add_argument("--contexts", type=list_of(int), default=[128, 1024], help="context lengths, e.g. 128,1024")
    parser.add_argument("--rows", type=list_of(int), default=list(range(1, 17)), help="rows per pass, e.g. 1,5,9,16")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds of passes behind each figure")
    parser.add_argument("--instruction-set", default=None,
                        help="the kernels' products on avx512_vnni, avx_vnni or avx2 (default: the fastest here)")
    add_settings_flags(parser, only=("models",))
    args = parser.parse_args(argv)
    if any(m < 1 or m > 64 for m in args.rows) or any(n < 1 for n in args.contexts):
        parser.error("rows must be in 1..64 and contexts at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_or_exit(args, "specdec-bench steps")
    runs = quantized_kernels.instruction_sets()
    chosen = args.instruction_set or (runs[0] if runs else None)
    if chosen is not None and chosen not in runs:
        print(f"specdec-bench steps: error: this CPU cannot run the kernels' {chosen} products "
              f"(it runs {', '.join(runs) or 'none: the kernels did not load'})", file=sys.stderr)
        return 2
    try:
        progress = TerminalProgress()
        pair = load_pair_for(settings, progress)
        progress.close()
    except ModelError as exc:
        print(f"specdec-bench steps: error: {exc}", file=sys.stderr)
        return 2
    too_long = [n for n in args.contexts if n + max(args.rows) >= pair.target.max_context]
    if too_long:
        print(f"specdec-bench steps: error: context {too_long[0]} + {max(args.rows)} rows does not fit the target's "
              f"{pair.target.max_context} tokens", file=sys.stderr)
        return 2
    name, flags = cpu_flags()
    models = settings.models
    kernels = f"the package's kernels, {chosen} products (this CPU runs {', '.join(runs)})" if runs \
        else "fbgemm and PyTorch ops"
    print(f"CPU: {name}; flags: {' '.join(flags) or 'none of ' + ', '.join(ISA_FLAGS)}; "
          f"{torch.get_num_threads()} threads; {kernels}")
    print(f"target {pair.target.name} ({models.precision}), draft "
          f"{pair.draft.name + ' (' + models.draft_precision + ')' if pair.draft else 'none'}\n")
    with quantized_kernels.using_instruction_set(chosen) if chosen else contextlib.nullcontext():
        print(format_costs(measure(pair, args.contexts, args.rows, args.min_time)))
    return 0
