"""What a bench invocation logs to MLflow: its plan and models as params, its summary as metrics
(per category and mode), a child per (K, tau) of a sweep, and its files as artifacts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from specdec_tui.bench.harness import BenchPlan, BenchRow, peak_memory_mb
from specdec_tui.bench.report import SummaryLine, paired_ratio
from specdec_tui.config import Settings, describe_settings
from specdec_tui.models import quantized_kernels
from specdec_tui.observability.tracking import (
    BenchLog,
    git_commit,
    metric_prefix,
    model_versions,
    package_version,
    summary_metrics,
)

BASELINES = ("target", "hf-assisted")


def bench_log(rows: Sequence[BenchRow], lines: Sequence[SummaryLine], plan: BenchPlan, settings: Settings,
              origins: Mapping[str, str], csv: Path, plot: Path | None, command: str,
              prompts: Path | None) -> BenchLog:
    models = settings.models
    params = {
        "target": models.target,
        "draft": models.draft,
        **model_versions(models.target, models.draft),
        "precision": models.precision,
        "draft_precision": models.draft_precision,
        "kernels": "specdec (AVX2)" if quantized_kernels.available() else "fbgemm",
        "modes": ",".join(plan.modes),
        "ks": ",".join(str(k) for k in plan.ks),
        "taus": ",".join(f"{t:g}" for t in plan.taus),
        "temperature": plan.temperature,
        "top_p": plan.top_p,
        "new_tokens": plan.max_new_tokens,
        "repeats": plan.repeats,
        "adaptive_k": plan.adaptive_k,
        "prompts": str(prompts) if prompts else "bundled suite",
        "prompt_count": len({r.prompt_id for r in rows}),
        "package_version": package_version(),
        "git_commit": git_commit(),
        "command": command,
    }
    metrics = {**summary_metrics(lines), **paired_metrics(rows), "peak_memory_mb": peak_memory_mb()}
    settings_pairs = sorted({(r.k, r.tau) for r in rows if r.k})
    children = {}
    if len(settings_pairs) > 1:
        for k, tau in settings_pairs:
            children[(k, tau)] = summary_metrics(line for line in lines if (line.k, line.tau) == (k, tau))
    artifacts = [csv] + ([plot] if plot is not None else [])
    return BenchLog(params, metrics, children, artifacts, {"settings.txt": describe_settings(settings, origins)},
                    run_name=f"bench {models.target} <- {models.draft}")


def paired_metrics(rows: Sequence[BenchRow]) -> dict[str, float | None]:
    """``category/mode[/kK_tauT]/paired_over_<baseline>``: the median per-prompt speedup over each baseline,
    per (K, tau) as the summary lines are."""
    values: dict[str, float | None] = {}
    for category in sorted({r.category for r in rows}):
        runs = sorted({(r.mode, r.k, r.tau) for r in rows if r.category == category})
        for baseline in (b for b in BASELINES if b in {mode for mode, _, _ in runs}):
            for mode, k, tau in runs:
                if mode != baseline:
                    values[f"{metric_prefix(category, mode, k, tau)}/paired_over_{baseline}"] = paired_ratio(rows, mode, baseline, category, (k, tau))
    return values
