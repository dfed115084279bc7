"""specdec-bench: speculative decoding against target-only and Hugging Face generate, side by side."""

from __future__ import annotations

import argparse
import itertools
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar, get_args

import torch
from tqdm import tqdm

from specdec_tui.bench.harness import (
    BenchPlan,
    BenchRow,
    DraftVariant,
    append_reply,
    peak_memory_mb,
    replies_path,
    run_suite,
    write_csv,
)
from specdec_tui.bench.llama_cpp import LLAMA_MODES, LlamaCppError
from specdec_tui.bench.modes import (
    ALL_MODES,
    DEFAULT_MODES,
    ENGINE_MODES,
    HF_MODES,
    TRACED_SUFFIX,
    run_mode,
    split_mode,
)
from specdec_tui.bench.report import format_summary, paired_ratio, plot_sweep, summarize_rows
from specdec_tui.bench.suite import SuiteError, default_suite_path, load_suite, select_prompts
from specdec_tui.config import (
    DecodingSettings,
    ModelSettings,
    PrecisionName,
    SettingsError,
    add_settings_flags,
    describe_settings,
    settings_from_args,
)
from specdec_tui.models.errors import ModelError
from specdec_tui.models.progress import ProgressFn
from specdec_tui.observability.setup import Observers, require, telemetry_from_settings
from specdec_tui.runtime import Runtime, draft_settings, load_runtime, with_draft
from specdec_tui.terminal_progress import TerminalProgress

T = TypeVar("T")


def list_of(convert: Callable[[str], T]) -> Callable[[str], list[T]]:
    def parse(text: str) -> list[T]:
        try:
            return [convert(part) for part in text.split(",") if part.strip()]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list: {exc}") from exc

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specdec-bench", description=__doc__,
                                     epilog="specdec-bench serve --help: the load check against a running server; "
                                            "specdec-bench steps --help: what a pass costs by rows verified")
    parser.add_argument("--prompts", type=Path, default=None, help="JSONL prompt suite (default: the bundled one)")
    parser.add_argument("--categories", type=list_of(str), default=None, help="only these categories")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    parser.add_argument("--modes", type=list_of(str), default=list(DEFAULT_MODES),
                        help=f"comma-separated, from {', '.join(ALL_MODES)} (default: all but the llama.cpp ones)")
    parser.add_argument("--ks", type=list_of(int), default=[DecodingSettings().k],
                        help="values of K, e.g. 2,4,6 (default: the default K)")
    parser.add_argument("--taus", type=list_of(float), default=[1.0], help="values of tau, e.g. 1.0,0.5")
    sweep = parser.add_argument_group(
        "draft sweep", "every combination of these is a draft variant; the drafting modes run once per variant, "
        "K and tau on each prompt, side by side (default: the draft settings)")
    sweep.add_argument("--drafts", type=list_of(str), default=None,
                       help="draft models (presets, folders or .gguf files) sharing the target's tokenizer")
    sweep.add_argument("--draft-precisions", type=list_of(str), default=None,
                       help=f"draft precisions, from {', '.join(get_args(PrecisionName))}")
    sweep.add_argument("--draft-heads", type=list_of(int), default=None,
                       help="draft output heads: the ids below N and the context's computed, 0 = the whole vocabulary")
    parser.add_argument("--bench-temperature", dest="temperature", type=float, default=0.0)
    parser.add_argument("--bench-top-p", dest="top_p", type=float, default=1.0)
    parser.add_argument("--new-tokens", type=int, default=128, help="max new tokens per reply")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--bench-seed", dest="seed", type=int, default=0)
    parser.add_argument("--min-confidence", type=float, default=None,
                        help="draft stop threshold (default: the setting decoding.draft_min_confidence)")
    parser.add_argument("--fixed-k", action="store_true", help="always draft K tokens (no adaptive K)")
    parser.add_argument("--out", type=Path, default=None, help="CSV path (default bench-results/<time>.csv)")
    parser.add_argument("--plot", type=Path, default=None, help="also write a PNG of tokens/s and acceptance at each point of the sweep")
    parser.add_argument("--telemetry-overhead", action="store_true",
                        help="also run each engine mode through the OpenTelemetry listener (MODE+telemetry), "
                             "interleaved, to measure what tracing costs")
    parser.add_argument("--mlflow", nargs="?", const="default", default=None, metavar="URI",
                        help="log this run to MLflow (default URI: a SQLite file in the data folder)")
    add_settings_flags(parser, only=("models", "telemetry", "resilience"))
    args = parser.parse_args(argv)
    for mode in args.modes:
        try:
            split_mode(mode)
        except ValueError as exc:
            parser.error(str(exc))
    if args.telemetry_overhead:
        args.modes += [f"{m}{TRACED_SUFFIX}" for m in args.modes if m in ENGINE_MODES]
    if any(k < 1 or k > 32 for k in args.ks):
        parser.error("every K must be in 1..32")
    if any(not 0 < t <= 1 for t in args.taus):
        parser.error("every tau must be in (0, 1]")
    unknown = [p for p in args.draft_precisions or () if p not in get_args(PrecisionName)]
    if unknown:
        parser.error(f"unknown draft precision {unknown[0]!r}; expected one of {', '.join(get_args(PrecisionName))}")
    if any(n < 0 for n in args.draft_heads or ()):
        parser.error("every draft head must be >= 0 (0 = the whole vocabulary)")
    if args.telemetry_overhead and len(draft_variants(args, ModelSettings())) > 1:
        parser.error("--telemetry-overhead runs with one draft; sweep the drafts in another run")
    return args


def draft_variants(args: argparse.Namespace, models: ModelSettings) -> list[DraftVariant]:
    """The drafts to sweep: every combination of the given models, precisions and heads, the draft
    settings where one is not given; the first is the one the bench loads with its target."""
    combos = itertools.product(args.drafts or [models.draft], args.draft_precisions or [models.draft_precision],
                               args.draft_heads or [models.draft_head_tokens])
    return list(dict.fromkeys(DraftVariant(model, precision, head or None) for model, precision, head in combos))


def load_variants(runtime: Runtime, variants: list[DraftVariant], progress: ProgressFn) -> dict[str, Runtime]:
    """A runtime per draft variant after the first, each with ``runtime``'s loaded target."""
    return {v.label: with_draft(runtime, v.model, v.precision, v.head_tokens, progress) for v in variants[1:]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        from specdec_tui.bench import load

        return load.main(argv[1:])
    if argv[:1] == ["steps"]:
        from specdec_tui.bench import steps

        return steps.main(argv[1:])
    args = parse_args(argv)
    try:
        settings, origins = settings_from_args(args)
        if origins["models.memory_budget_gb"] == "default":
            # The bench's process holds other modes' models too (transformers', llama.cpp's): its memory
            # is not the pair's, and a budget would drop the target's int8 blocks at the first reply.
            settings = settings.model_copy(update={"models": settings.models.model_copy(
                update={"memory_budget_gb": 0.0})})
            origins["models.memory_budget_gb"] = "off in the bench, unless given"
        if args.show_settings:
            print(describe_settings(settings, origins))
            return 0
        prompts = load_suite(args.prompts or default_suite_path())
        prompts = select_prompts(prompts, args.categories, args.limit)
        # Bench runs are not chat replies: only telemetry listens to them (never with --telemetry-overhead,
        # where the plain modes are the untraced half of the comparison).
        telemetry = telemetry_from_settings(settings.telemetry) if settings.telemetry.enabled else None
        overhead = telemetry_from_settings(settings.telemetry.model_copy(
            update={"exporter": "none"} if not settings.telemetry.enabled else {})) if args.telemetry_overhead else None
        if args.mlflow:
            require("tracking", "--mlflow", "mlflow")
        variants = draft_variants(args, settings.models)
        first = variants[0]
        settings = draft_settings(settings, first.model, first.precision, first.head_tokens)
        progress = TerminalProgress()
        runtime = load_runtime(settings, progress, Observers(telemetry=None if overhead else telemetry))
        draft_runtimes = load_variants(runtime, variants, progress)
        if any(split_mode(mode)[0] in (*HF_MODES, *LLAMA_MODES) for mode in args.modes):
            for model in (runtime.pair.target, runtime.pair.draft):
                if model is not None:  # these modes read the model files, which packing may have removed
                    model.weights_source(progress)
        progress.close()
    except (SettingsError, ModelError, SuiteError) as exc:
        print(f"specdec-bench: error: {exc}", file=sys.stderr)
        return 2
    pair, models = runtime.pair, settings.models
    traced = replace(runtime, observers=Observers(telemetry=overhead)) if overhead else None
    min_confidence = settings.decoding.draft_min_confidence if args.min_confidence is None else args.min_confidence
    plan = BenchPlan(modes=args.modes, ks=args.ks, taus=args.taus, temperature=args.temperature, top_p=args.top_p,
                     max_new_tokens=args.new_tokens, repeats=args.repeats, seed=args.seed,
                     adaptive_k=settings.decoding.adaptive_k and not args.fixed_k,
                     draft_min_confidence=min_confidence, lookup_k=settings.decoding.lookup_k,
                     drafts=[v.label for v in variants])
    print(f"target {models.target} ({models.precision}), draft {', '.join(plan.drafts)}, "
          f"device {pair.target.device}, torch threads {torch.get_num_threads()}", file=sys.stderr)
    warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
    try:
        for mode in plan.modes:  # first calls load, allocate and page in; keep them out of the numbers
            for variant in {draft for draft, _, _ in plan.settings_for(mode)}:
                run_mode(draft_runtimes.get(variant, runtime), mode, warm,
                         plan.params(plan.ks[0], 1.0, 0, max_new_tokens=8), traced)
    except LlamaCppError as exc:
        print(f"specdec-bench: error: {exc}", file=sys.stderr)
        return 2
    out = args.out or Path("bench-results") / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.csv"
    replies = replies_path(out)
    replies.parent.mkdir(parents=True, exist_ok=True)
    replies.write_text("")
    bar = tqdm(total=len(prompts) * plan.runs_per_prompt(), unit="run", file=sys.stderr, dynamic_ncols=True)

    def on_row(row: BenchRow, token_ids: tuple[int, ...]) -> None:
        append_reply(replies, row, token_ids)
        bar.set_postfix_str(f"{row.prompt_id} {row.mode} k={row.k} {row.tokens_per_s:.1f} tok/s", refresh=False)
        bar.update()

    rows = run_suite(runtime, prompts, plan, on_row, traced, draft_runtimes)
    bar.close()
    write_csv(rows, out)
    lines = summarize_rows(rows)
    print(format_summary(lines))
    failed = [row for row in rows if row.failed_passes or row.degraded_tokens]
    if failed or settings.faults.enabled:
        print(f"\nWARNING: models failed during {len(failed)} of {len(rows)} runs "
              f"({sum(r.failed_passes for r in rows)} failed passes, {sum(r.degraded_tokens for r in rows)} "
              f"tokens written by the draft alone); those speeds are not the pair's"
              + (f". Fault injection is on: {settings.faults.describe()}" if settings.faults.enabled else ""))
    print(f"\npeak resident memory: {peak_memory_mb():.0f} MB")
    print(f"rows: {out}\nreplies: {replies}")
    if args.plot:
        plot_sweep(lines, args.plot)
        print(f"plot: {args.plot}")
    for category in sorted({row.category for row in rows}):
        for mode in (m for m in plan.modes if m.endswith(TRACED_SUFFIX)):
            ratio = paired_ratio(rows, mode, mode.removesuffix(TRACED_SUFFIX), category)
            if ratio is not None:
                print(f"telemetry overhead, {category}, {mode.removesuffix(TRACED_SUFFIX)}: paired tok/s ratio "
                      f"{ratio:.3f} (traced / untraced)")
    peers = [m for m in plan.modes if m in LLAMA_MODES]
    ours = [m for m in plan.modes if m in ENGINE_MODES and m != "target"]
    for category in sorted({row.category for row in rows}) if peers else ():
        for mode in ours:
            points = plan.settings_for(mode)
            for point, peer_mode in itertools.product(points if len(points) > 1 else [None], peers):
                ratio = paired_ratio(rows, mode, peer_mode, category, point)
                at = "" if point is None else f" ({point[0] + ', ' if point[0] else ''}K={point[1]}, tau={point[2]:g})"
                if ratio is not None:
                    print(f"{category}: {mode}{at} / {peer_mode} paired tok/s ratio {ratio:.3f} "
                          "(speed only: llama.cpp runs the GGUF's own quantization, so its text differs)")
    command = "specdec-bench " + " ".join(shlex.quote(a) for a in argv)
    if args.mlflow:
        from specdec_tui.bench.tracking import bench_log
        from specdec_tui.observability.tracking import log_bench, resolve_tracking_uri

        uri = resolve_tracking_uri(args.mlflow)
        logged = bench_log(rows, lines, plan, settings, origins, out, args.plot, command, args.prompts,
                           variants if len(variants) > 1 else ())
        run_id = log_bench(uri, logged)
        print(f"mlflow: run {run_id} at {uri}" if run_id else f"mlflow: not logged (see the warning); rows: {out}")
    print(f"command: {command}")
    for observer in (telemetry, overhead):
        if observer is not None:
            observer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
