"""AVX2's int8 products two groups a step, for a prompt's calls: how often the target's weights allow
it, and what it saves, exact and not.

AVX2 multiplies a row's 7-bit activations by int8 weights with vpmaddubsw (pairs of products, int16)
and widens every group of four inputs with vpmaddwd: four multiplies for eight inputs. Adding two
groups' int16 pairs before one widening takes three, but a lane then holds four products, and where
a lane's positive weights (or its negative weights' magnitudes) sum past 32767 / 127 = 258 the sum
can leave int16. Such group pairs have to be taken apart to keep the sums exact.

This script reports, over every int8 matrix of the default target's layers, the share of group pairs (16
columns x 8 inputs) that fit. With the patch beside it applied (``git apply
docs/benchmarks/2026-12-05-paired-groups.patch``: the paired passes for calls of 32 rows or more,
each block's unfitting pairs marked once at load, a step over a marked pair taking the two groups
apart), it also times ``int8_linear`` over layers 4-11 of the target at several row counts, round
after round in turn: one group a step (main's passes), paired with the marks (exact), and paired with
no marks (not exact: what pairing would save if nothing had to be taken apart).

Run: .venv/bin/python docs/benchmarks/2026-12-05-paired-groups.py
The output of 2026-12-05 (AMD EPYC Zen 3, 2 cores, AVX2) is 2026-12-05-paired-groups.txt beside this file.
"""

from __future__ import annotations

import time
from statistics import median

import torch

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.models.fast_llama import LAYER_LINEARS
from specdec_tui.models.precision import PackedInt8Linear
from specdec_tui.runtime import load_runtime

ROWS = (9, 16, 40, 64, 124, 160)
ROUNDS = 15
LIMIT = 32767 // 127


def fitting_share(packed: torch.Tensor) -> float:
    """The share of ``packed``'s group pairs whose every lane stays inside int16 when paired."""
    blocks, groups = packed.shape[:2]
    pairs = packed[:, : groups // 2 * 2].to(torch.int32).view(blocks, groups // 2, 2, 16, 2, 2)
    positive = pairs.clamp(min=0).sum(dim=(2, 5))  # a lane: one column's pair of inputs, in both groups
    negative = (-pairs).clamp(min=0).sum(dim=(2, 5))
    over = ((positive > LIMIT) | (negative > LIMIT)).flatten(2).any(dim=2)
    return 1.0 - over.float().mean().item()


def main() -> None:
    runtime = load_runtime(Settings())
    target = runtime.pair.target.runner
    linears = [getattr(layer, name) for layer in target.layers for name in LAYER_LINEARS]
    linears = [linear for linear in linears if isinstance(linear, PackedInt8Linear)]
    shares = [fitting_share(linear.packed) for linear in linears]
    print(f"{quantized_kernels.instruction_set()} products, {torch.get_num_threads()} threads")
    print(f"group pairs that fit int16 when paired, over the target's {len(linears)} int8 matrices: "
          f"{100 * median(shares):.1f}% (median of the matrices), {100 * min(shares):.1f}% (fewest)")
    if not hasattr(torch.ops.specdec, "int8_unsafe_pairs") or not hasattr(linears[0], "unsafe_pairs"):
        print("(the kernels have no paired passes: apply 2026-12-05-paired-groups.patch to time them)")
        return

    timed = linears[4 * 4 : 12 * 4]
    no_marks = [torch.zeros_like(linear.unsafe_pairs) for linear in timed]
    torch.manual_seed(0)
    inputs = {m: {width: torch.randn(m, width) for width in {linear.in_features for linear in timed}} for m in ROWS}

    def call(m: int, way: str) -> list[torch.Tensor]:
        outs = []
        for linear, zeros in zip(timed, no_marks, strict=True):
            marks = zeros if way == "paired, no marks" else linear.unsafe_pairs
            outs.append(torch.ops.specdec.int8_linear(inputs[m][linear.in_features], linear.packed, linear.scales,
                                                      linear.column_sums, linear.bias, linear.out_features, marks))
        return outs

    ways = ("one group a step", "paired, marks", "paired, no marks")

    def run(m: int, way: str) -> list[torch.Tensor]:
        with quantized_kernels.using_wide_passes(way != "one group a step"):
            return call(m, way)

    for m in ROWS:
        main_outs, exact = run(m, ways[0]), run(m, ways[1])
        assert all(torch.equal(a, b) for a, b in zip(main_outs, exact, strict=True)), f"{m} rows: paired with marks differs"
    times: dict[tuple[str, int], list[float]] = {(way, m): [] for way in ways for m in ROWS}
    for round_ in range(ROUNDS):
        for m in ROWS:
            order = ways if round_ % 2 == 0 else ways[::-1]
            for way in order:
                start = time.perf_counter()
                run(m, way)
                times[(way, m)].append(time.perf_counter() - start)
    print(f"\nint8_linear over layers 4-11 (32 matrices), median of {ROUNDS} rounds; paired with marks gives "
          "main's bits at every row count (checked)\n")
    print("| rows | one group a step, ms | paired, marks / one group | paired, no marks / one group |")
    print("|---|---|---|---|")
    for m in ROWS:
        base = median(times[(ways[0], m)])
        print(f"| {m} | {1000 * base:.1f} | {median(times[(ways[1], m)]) / base:.3f} | "
              f"{median(times[(ways[2], m)]) / base:.3f} |")


if __name__ == "__main__":
    main()
