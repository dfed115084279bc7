"""What a bench invocation logs to MLflow: its plan and models as params, its summary as metrics
(per category and mode), a child per point (draft, K, tau) of a sweep, and its files as artifacts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from specdec_tui.bench.harness import BenchPlan, BenchRow, DraftVariant, peak_memory_mb
from specdec_tui.bench.report import SummaryLine, at_point, paired_ratio, sweep_points, sweeps_drafts
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
              prompts: Path | None, variants: Sequence[DraftVariant] = ()) -> BenchLog:
    """``variants``: the drafts swept (``plan.drafts`` are their labels), when more than the settings' one."""
    models = settings.models
    params = {
        "target": models.target,
        "draft": models.draft,
        **model_versions(models.target, models.draft),
        "precision": models.precision,
        "draft_precision": models.draft_precision,
        "kernels": f"specdec ({quantized_kernels.instruction_set()})" if quantized_kernels.available() else "fbgemm",
        "modes": ",".join(plan.modes),
        "ks": ",".join(str(k) for k in plan.ks),
        "taus": ",".join(f"{t:g}" for t in plan.taus),
        "drafts": "; ".join(v.label for v in variants) or None,
        "temperature": plan.temperature,
        "top_p": plan.top_p,
        "new_tokens": plan.max_new_tokens,
        "repeats": plan.repeats,
        "adaptive_k": plan.adaptive_k,
        "lookup_k": plan.lookup_k,
        "prompts": str(prompts) if prompts else "bundled suite",
        "prompt_count": len({r.prompt_id for r in rows}),
        "package_version": package_version(),
        "git_commit": git_commit(),
        "command": command,
    }
    by_draft = sweeps_drafts(lines)
    metrics = {**summary_metrics(lines, by_draft), **paired_metrics(rows, by_draft), "peak_memory_mb": peak_memory_mb()}
    labelled = {v.label: v for v in variants}
    points = sweep_points(lines)
    children = {}
    if len(points) > 1:
        for point in points:
            draft, k, tau = point
            variant = labelled.get(draft)
            differs = {"draft": variant.model, "draft_precision": variant.precision,
                       "draft_head_tokens": variant.head_tokens or 0, "draft_variant": draft} if variant else {}
            # A point is named by its draft only in a draft sweep.
            children[(draft if by_draft else "", k, tau)] = (differs, summary_metrics(
                line for line in lines if at_point(line, point)))
    artifacts = [csv] + ([plot] if plot is not None else [])
    return BenchLog(params, metrics, children, artifacts, {"settings.txt": describe_settings(settings, origins)},
                    run_name=f"bench {models.target} <- {models.draft}")


def paired_metrics(rows: Sequence[BenchRow], by_draft: bool = False) -> dict[str, float | None]:
    """``category/mode[/draft][/kK_tauT]/paired_over_<baseline>``: the median per-prompt speedup over each
    baseline, per point as the summary lines are."""
    values: dict[str, float | None] = {}
    for category in sorted({r.category for r in rows}):
        runs = sorted({(r.mode, r.draft, r.k, r.tau) for r in rows if r.category == category})
        for baseline in (b for b in BASELINES if b in {run[0] for run in runs}):
            for mode, draft, k, tau in runs:
                if mode != baseline:
                    key = metric_prefix(category, mode, k, tau, draft if by_draft else "")
                    values[f"{key}/paired_over_{baseline}"] = paired_ratio(rows, mode, baseline, category,
                                                                           (draft, k, tau))
    return values
