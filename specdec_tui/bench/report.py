"""Summaries of benchmark rows: the per-category table and the tokens/s-against-K plot."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from specdec_tui.bench.harness import BenchRow


@dataclass(frozen=True)
class SummaryLine:
    category: str
    mode: str
    k: int
    tau: float
    runs: int
    median_tokens_per_s: float
    median_speedup: float
    acceptance_rate: float | None
    identical_share: float


def summarize_rows(rows: Sequence[BenchRow]) -> list[SummaryLine]:
    groups: dict[tuple[str, str, int, float], list[BenchRow]] = defaultdict(list)
    for row in rows:
        groups[(row.category, row.mode, row.k, row.tau)].append(row)
    lines = []
    for (category, mode, k, tau), group in groups.items():
        rates = [r.acceptance_rate for r in group if r.acceptance_rate is not None]
        lines.append(SummaryLine(
            category=category,
            mode=mode,
            k=k,
            tau=tau,
            runs=len(group),
            median_tokens_per_s=median(r.tokens_per_s for r in group),
            median_speedup=median(r.speedup_vs_target for r in group),
            acceptance_rate=sum(rates) / len(rates) if rates else None,
            identical_share=sum(r.identical_to_target for r in group) / len(group),
        ))
    return lines


def paired_ratio(rows: Sequence[BenchRow], mode: str, baseline: str, category: str,
                 setting: tuple[int, float] | None = None) -> float | None:
    """Median, over the category's prompts and repeats, of ``mode``'s tokens/s over ``baseline``'s on the
    same prompt (and the same K and tau, unless the baseline runs once per prompt); ``setting`` keeps
    only ``mode``'s runs at that (K, tau)."""
    picked = [r for r in rows if r.category == category and (
        setting is None or r.mode != mode or (r.k, r.tau) == setting)]
    base_rows = [r for r in picked if r.mode == baseline]
    per_prompt = all(r.k == 0 for r in base_rows)

    def key(row: BenchRow) -> tuple:
        return (row.prompt_id, row.repeat) if per_prompt else (row.prompt_id, row.repeat, row.k, row.tau)

    base = {key(r): r.tokens_per_s for r in base_rows}
    ratios = [r.tokens_per_s / base[key(r)] for r in picked
              if r.mode == mode and base.get(key(r))]
    return median(ratios) if ratios else None


def format_summary(lines: Sequence[SummaryLine]) -> str:
    """A Markdown table, one row per (category, mode, K, tau)."""
    header = "| category | mode | K | tau | runs | median tok/s | speedup vs target | acceptance | identical |"
    out = [header, "|" + "---|" * 9]
    for line in lines:
        acceptance = "" if line.acceptance_rate is None else f"{line.acceptance_rate:.2f}"
        k = "" if line.k == 0 else str(line.k)
        tau = "" if line.k == 0 else f"{line.tau:g}"
        out.append(f"| {line.category} | {line.mode} | {k} | {tau} | {line.runs} | {line.median_tokens_per_s:.2f} "
                   f"| {line.median_speedup:.2f}x | {acceptance} | {line.identical_share:.0%} |")
    return "\n".join(out)


def plot_tokens_per_s(lines: Sequence[SummaryLine], path: Path) -> None:
    """PNG: median tokens/s against K, one panel per category, one line per mode (tau = 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    categories = sorted({line.category for line in lines})
    figure, axes = plt.subplots(1, len(categories), figsize=(5 * len(categories), 4), squeeze=False)
    for axis, category in zip(axes[0], categories, strict=True):
        for mode in sorted({line.mode for line in lines}):
            points = sorted((line.k, line.median_tokens_per_s) for line in lines
                            if line.category == category and line.mode == mode and line.tau == 1.0)
            if len(points) == 1 and points[0][0] == 0:
                axis.axhline(points[0][1], linestyle="--", label=mode, color="grey" if mode == "target" else None)
            elif points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=mode)
        axis.set_title(category)
        axis.set_xlabel("K (tokens drafted per step)")
        axis.set_ylabel("median tokens/s")
        axis.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
