"""Summaries of benchmark rows: the per-category table, paired ratios, and the plot of the sweep."""

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
    draft: str
    k: int
    tau: float
    runs: int
    median_tokens_per_s: float
    median_speedup: float
    acceptance_rate: float | None
    identical_share: float


def summarize_rows(rows: Sequence[BenchRow]) -> list[SummaryLine]:
    groups: dict[tuple[str, str, str, int, float], list[BenchRow]] = defaultdict(list)
    for row in rows:
        groups[(row.category, row.mode, row.draft, row.k, row.tau)].append(row)
    lines = []
    for (category, mode, draft, k, tau), group in groups.items():
        rates = [r.acceptance_rate for r in group if r.acceptance_rate is not None]
        lines.append(SummaryLine(
            category=category,
            mode=mode,
            draft=draft,
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
                 point: tuple[str, int, float] | None = None) -> float | None:
    """Median, over the category's prompts and repeats, of ``mode``'s tokens/s over ``baseline``'s on the
    same prompt (and the same K and tau, unless the baseline runs once per prompt, and the same draft,
    if the baseline sweeps drafts too); ``point`` keeps only ``mode``'s runs at that (draft, K, tau)."""
    picked = [r for r in rows if r.category == category and (
        point is None or r.mode != mode or (r.draft, r.k, r.tau) == point)]
    base_rows = [r for r in picked if r.mode == baseline]
    per_prompt = all(r.k == 0 for r in base_rows)
    per_draft = any(r.draft for r in base_rows)

    def key(row: BenchRow) -> tuple:
        if per_prompt:
            return row.prompt_id, row.repeat
        return row.prompt_id, row.repeat, row.k, row.tau, row.draft if per_draft else ""

    base = {key(r): r.tokens_per_s for r in base_rows}
    ratios = [r.tokens_per_s / base[key(r)] for r in picked
              if r.mode == mode and base.get(key(r))]
    return median(ratios) if ratios else None


def sweeps_drafts(lines: Sequence[SummaryLine]) -> bool:
    return len({line.draft for line in lines if line.draft}) > 1


def format_summary(lines: Sequence[SummaryLine]) -> str:
    """A Markdown table, one row per (category, mode, draft, K, tau); the draft column only in a draft sweep."""
    drafts = sweeps_drafts(lines)
    header = "| category | mode |" + (" draft |" if drafts else "") + (
        " K | tau | runs | median tok/s | speedup vs target | acceptance | identical |")
    out = [header, "|" + "---|" * (9 + drafts)]
    for line in lines:
        acceptance = "" if line.acceptance_rate is None else f"{line.acceptance_rate:.2f}"
        k = "" if line.k == 0 else str(line.k)
        tau = "" if line.k == 0 else f"{line.tau:g}"
        draft = f" {line.draft} |" if drafts else ""
        out.append(f"| {line.category} | {line.mode} |{draft} {k} | {tau} | {line.runs} | "
                   f"{line.median_tokens_per_s:.2f} | {line.median_speedup:.2f}x | {acceptance} | "
                   f"{line.identical_share:.0%} |")
    return "\n".join(out)


def distinct_words(names: set[str]) -> dict[str, str]:
    """Each name with the words every name shares at the same place left out ("int4 head32768" for
    "qwen2.5-coder-0.5b int4 head32768" in a sweep of one model); names of different shapes stay whole."""
    split = {name: name.split(" ") for name in names}
    if len({len(words) for words in split.values()}) != 1:
        return {name: name for name in names}
    varying = [i for i, column in enumerate(zip(*split.values(), strict=True)) if len(set(column)) > 1]
    return {name: " ".join(words[i] for i in varying) or name for name, words in split.items()}


Point = tuple[str, int, float]


def sweep_points(lines: Sequence[SummaryLine]) -> list[Point]:
    """The sweep's (draft, K, tau) points, in the bench's order."""
    drafting = [line for line in lines if line.k]
    with_draft = [line for line in drafting if line.draft] or drafting
    return list(dict.fromkeys((line.draft, line.k, line.tau) for line in with_draft))


def at_point(line: SummaryLine, point: Point) -> bool:
    """Whether ``line`` belongs to ``point``. A mode that drafts without the draft model (prompt
    lookup) has no draft of its own: it is at every draft's point of its K and tau."""
    return (line.k, line.tau) == point[1:] and line.draft in (point[0], "")


def point_labels(lines: Sequence[SummaryLine]) -> dict[Point, str]:
    """Each point of ``sweep_points``, named by what varies across the sweep."""
    points = sweep_points(lines)
    drafts, ks, taus = ({p[i] for p in points} for i in range(3))
    shown = distinct_words(drafts)
    labels = {}
    for draft, k, tau in points:
        parts = ([shown[draft]] if len(drafts) > 1 else []) + (
            [f"K={k}"] if len(ks) > 1 or len(points) == 1 else []) + ([f"tau={tau:g}"] if len(taus) > 1 else [])
        labels[draft, k, tau] = "\n".join(parts)
    return labels


def plot_sweep(lines: Sequence[SummaryLine], path: Path) -> None:
    """PNG: median tokens/s (top) and acceptance (bottom) at each point of the sweep, one column per
    category, one line per drafting mode; a mode that does not draft is a dashed level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = point_labels(lines)
    points = list(labels)
    categories = sorted({line.category for line in lines})
    modes = sorted({line.mode for line in lines})
    colors = {mode: plt.get_cmap("tab10")(i % 10) for i, mode in enumerate(modes)}  # one per mode, both panels
    figure, axes = plt.subplots(2, len(categories), figsize=(max(5.0, 0.8 * len(points) + 2) * len(categories), 7.5),
                                squeeze=False, sharex="col")
    for column, category in enumerate(categories):
        speed, acceptance = axes[0][column], axes[1][column]
        for mode in (m for m in modes if any(line.mode == m and line.category == category for line in lines)):
            at = {(line.draft, line.k, line.tau): line for line in lines
                  if line.category == category and line.mode == mode}
            if all(point[1] == 0 for point in at):
                [level] = at.values()
                speed.axhline(level.median_tokens_per_s, linestyle="--", label=mode,
                              color="grey" if mode == "target" else colors[mode])
                continue
            found = {i: next((line for line in at.values() if at_point(line, point)), None)
                     for i, point in enumerate(points)}
            xs = [i for i, line in found.items() if line is not None]
            speed.plot(xs, [found[i].median_tokens_per_s for i in xs], marker="o", label=mode, color=colors[mode])
            rates = [(i, found[i].acceptance_rate) for i in xs if found[i].acceptance_rate is not None]
            if rates:
                acceptance.plot([i for i, _ in rates], [r for _, r in rates], marker="o", label=mode,
                                color=colors[mode])
        speed.set_title(category)
        speed.set_ylabel("median tokens/s")
        speed.legend(fontsize="small")
        acceptance.set_ylabel("acceptance rate")
        acceptance.set_ylim(0, 1.05)
        acceptance.set_xticks(range(len(points)), [labels[p] for p in points], fontsize="small",
                              rotation=35 if len(points) > 4 else 0, ha="right" if len(points) > 4 else "center")
        acceptance.set_xlabel("sweep point")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
