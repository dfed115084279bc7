"""The benchmark loop: every prompt through every mode, interleaved, one CSV row per run.

A sweep is the product of draft variants, K and tau: each drafting mode runs once per point on each
prompt, every point beside the others, so their speeds compare as pairs."""

from __future__ import annotations

import csv
import itertools
import json
import resource
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from specdec_tui.bench.modes import DRAFT_VARIANT_MODES, SINGLE_SETTING_MODES, RunResult, run_mode, split_mode
from specdec_tui.bench.suite import BenchPrompt
from specdec_tui.engine.cached_model import first_difference
from specdec_tui.engine.decoder import DecodeParams
from specdec_tui.runtime import Runtime


@dataclass(frozen=True)
class BenchRow:
    prompt_id: str
    category: str
    mode: str
    #: The draft variant a drafting mode ran with (``BenchPlan.drafts``); empty for the other modes.
    draft: str
    k: int
    tau: float
    repeat: int
    prompt_tokens: int
    new_tokens: int
    seconds: float
    tokens_per_s: float
    acceptance_rate: float | None
    mean_accepted: float | None
    identical_to_target: bool
    speedup_vs_target: float
    #: Nonzero only when a model failed (see ``[resilience]``): such a run's speed is not the pair's.
    degraded_tokens: int = 0
    failed_passes: int = 0
    #: The first token where this reply parts from target-only's; None where identical. (llama.cpp's
    #: replies part by design: its own quantization.)
    differs_at: int | None = None


@dataclass(frozen=True)
class DraftVariant:
    """One draft of a sweep: a model at a precision, its output head trimmed to ``head_tokens`` ids."""

    model: str
    precision: str
    head_tokens: int | None

    @property
    def label(self) -> str:
        return f"{self.model} {self.precision} head{self.head_tokens or '-all'}"


@dataclass(frozen=True)
class BenchPlan:
    modes: Sequence[str]
    ks: Sequence[int]
    taus: Sequence[float]
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    repeats: int = 1
    seed: int = 0
    adaptive_k: bool = True
    draft_min_confidence: float = 0.0
    lookup_k: int = 8
    #: Labels of the draft variants swept; the first is the runtime's own draft.
    drafts: Sequence[str] = ("",)

    def params(self, k: int, tau: float, repeat: int, max_new_tokens: int | None = None) -> DecodeParams:
        return DecodeParams(k=max(k, 1), tau=tau, temperature=self.temperature, top_p=self.top_p,
                            max_new_tokens=max_new_tokens or self.max_new_tokens, seed=self.seed + repeat,
                            adaptive_k=self.adaptive_k, draft_min_confidence=self.draft_min_confidence,
                            lookup_k=self.lookup_k)

    def settings_for(self, mode: str) -> list[tuple[str, int, float]]:
        """The (draft, K, tau) points ``mode`` runs at on each prompt."""
        base = split_mode(mode)[0]
        if base in SINGLE_SETTING_MODES:
            return [("", 0, 1.0)]
        drafts = self.drafts if base in DRAFT_VARIANT_MODES else ("",)
        return list(itertools.product(drafts, self.ks, self.taus))

    def runs_per_prompt(self) -> int:
        modes = ["target", *[m for m in self.modes if m != "target"]]
        return self.repeats * sum(len(self.settings_for(m)) for m in modes)


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_suite(
    runtime: Runtime,
    prompts: Sequence[BenchPrompt],
    plan: BenchPlan,
    on_row: Callable[[BenchRow, tuple[int, ...]], None] = lambda row, token_ids: None,
    traced: Runtime | None = None,
    draft_runtimes: Mapping[str, Runtime] | None = None,
) -> list[BenchRow]:
    """Run ``plan`` over ``prompts``; ``target`` always runs first for each prompt and repeat.

    ``on_row`` gets each row as it is made, with the reply's token ids.
    ``draft_runtimes`` maps each of ``plan.drafts`` but the first to a runtime with that draft and
    ``runtime``'s target; the first is ``runtime``'s own."""
    runtimes = {plan.drafts[0]: runtime, "": runtime, **(draft_runtimes or {})}
    missing = [d for d in plan.drafts if d not in runtimes]
    if missing:
        raise ValueError(f"no runtime for the draft variants {', '.join(missing)}")
    if traced is not None and len(plan.drafts) > 1:
        raise ValueError("the telemetry overhead runs with one draft; sweep the drafts in another run")
    rows: list[BenchRow] = []
    modes = ["target", *[m for m in plan.modes if m != "target"]]
    for prompt in prompts:
        prompt_ids = runtime.prompt_ids(prompt.messages)
        for repeat in range(plan.repeats):
            reference: RunResult | None = None
            for mode in modes:
                for draft, k, tau in plan.settings_for(mode):
                    result = run_mode(runtimes[draft], mode, prompt_ids, plan.params(k, tau, repeat), traced)
                    reference = reference or result
                    differs_at = first_difference(result.token_ids, reference.token_ids)
                    row = BenchRow(
                        prompt_id=prompt.id,
                        category=prompt.category,
                        mode=mode,
                        draft=draft,
                        k=k,
                        tau=tau,
                        repeat=repeat,
                        prompt_tokens=len(prompt_ids),
                        new_tokens=len(result.token_ids),
                        seconds=round(result.seconds, 4),
                        tokens_per_s=round(result.tokens_per_s, 3),
                        acceptance_rate=None if result.acceptance_rate is None else round(result.acceptance_rate, 4),
                        mean_accepted=None if result.mean_accepted is None else round(result.mean_accepted, 3),
                        identical_to_target=differs_at is None,
                        speedup_vs_target=round(result.tokens_per_s / reference.tokens_per_s, 3)
                        if reference.tokens_per_s else 0.0,
                        degraded_tokens=result.degraded_tokens,
                        failed_passes=result.failed_passes,
                        differs_at=differs_at,
                    )
                    rows.append(row)
                    on_row(row, result.token_ids)
    return rows


def write_csv(rows: Sequence[BenchRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[f.name for f in fields(BenchRow)])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in asdict(row).items()})


def replies_path(csv_path: Path) -> Path:
    """Where each run's token ids go beside the CSV: a JSON line per row, in the CSV's order, so a
    reply that parts from target-only's can be decoded again and told apart."""
    return csv_path.with_suffix(".replies.jsonl")


def append_reply(path: Path, row: BenchRow, token_ids: Sequence[int]) -> None:
    line = {"prompt_id": row.prompt_id, "mode": row.mode, "draft": row.draft, "k": row.k, "tau": row.tau,
            "repeat": row.repeat, "token_ids": list(token_ids)}
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
