"""The benchmark loop: every prompt through every mode, interleaved, one CSV row per run."""

from __future__ import annotations

import csv
import itertools
import resource
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from specdec_tui.bench.modes import SINGLE_SETTING_MODES, RunResult, run_mode
from specdec_tui.bench.suite import BenchPrompt
from specdec_tui.chat.template import render_prompt
from specdec_tui.engine.decoder import DecodeParams
from specdec_tui.engine.session import Engine
from specdec_tui.models.loader import ModelPair


@dataclass(frozen=True)
class BenchRow:
    prompt_id: str
    category: str
    mode: str
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

    def settings_for(self, mode: str) -> list[tuple[int, float]]:
        if mode in SINGLE_SETTING_MODES:
            return [(0, 1.0)]
        return list(itertools.product(self.ks, self.taus))

    def runs_per_prompt(self) -> int:
        modes = ["target", *[m for m in self.modes if m != "target"]]
        return self.repeats * sum(len(self.settings_for(m)) for m in modes)


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_suite(
    pair: ModelPair,
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    plan: BenchPlan,
    on_row: Callable[[BenchRow], None] = lambda row: None,
) -> list[BenchRow]:
    """Run ``plan`` over ``prompts``; ``target`` always runs first for each prompt and repeat."""
    rows: list[BenchRow] = []
    modes = ["target", *[m for m in plan.modes if m != "target"]]
    for prompt in prompts:
        prompt_ids = render_prompt(pair.target.tokenizer, prompt.messages)
        for repeat in range(plan.repeats):
            reference: RunResult | None = None
            for mode in modes:
                for k, tau in plan.settings_for(mode):
                    params = DecodeParams(k=max(k, 1), tau=tau, temperature=plan.temperature, top_p=plan.top_p,
                                          max_new_tokens=plan.max_new_tokens, seed=plan.seed + repeat)
                    result = run_mode(pair, engine, mode, prompt_ids, params)
                    reference = reference or result
                    row = BenchRow(
                        prompt_id=prompt.id,
                        category=prompt.category,
                        mode=mode,
                        k=k,
                        tau=tau,
                        repeat=repeat,
                        prompt_tokens=len(prompt_ids),
                        new_tokens=len(result.token_ids),
                        seconds=round(result.seconds, 4),
                        tokens_per_s=round(result.tokens_per_s, 3),
                        acceptance_rate=None if result.acceptance_rate is None else round(result.acceptance_rate, 4),
                        mean_accepted=None if result.mean_accepted is None else round(result.mean_accepted, 3),
                        identical_to_target=result.token_ids == reference.token_ids,
                        speedup_vs_target=round(result.tokens_per_s / reference.tokens_per_s, 3)
                        if reference.tokens_per_s else 0.0,
                    )
                    rows.append(row)
                    on_row(row)
    return rows


def write_csv(rows: Sequence[BenchRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[f.name for f in fields(BenchRow)])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in asdict(row).items()})
