"""One benchmark run of one prompt in one mode: ours through the engine, the peers through HF
generate() on the same loaded pair or through llama.cpp on the pair's GGUF files."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel

from specdec_tui.bench.llama_cpp import LLAMA_MODES, peer
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent
from specdec_tui.engine.modes import HYBRID, MODEL, PROMPT_LOOKUP, TARGET
from specdec_tui.models.loader import ModelPair
from specdec_tui.runtime import Runtime

#: Bench mode -> engine mode. The hf-* modes are Hugging Face generate() on the same loaded pair.
ENGINE_MODES = {"target": TARGET, "speculative": MODEL, "prompt-lookup": PROMPT_LOOKUP, "hybrid": HYBRID}
HF_MODES = ("hf-assisted", "hf-target")
#: What a bench runs unless told: the llama.cpp modes need the optional llama-cpp-python.
DEFAULT_MODES = (*ENGINE_MODES, *HF_MODES)
ALL_MODES = (*DEFAULT_MODES, *LLAMA_MODES)
#: An engine mode with this suffix runs through the telemetry listener, for overhead A/B runs.
TRACED_SUFFIX = "+telemetry"
#: Modes where K and tau change nothing; they run once per prompt and repeat.
SINGLE_SETTING_MODES = frozenset({"target", "hf-target", "llama.cpp-target"})
#: Modes that run the loaded draft model, once per draft variant of a sweep. (llama.cpp's draft mode
#: runs the first draft's GGUF at the file's own quantization, so it runs once.)
DRAFT_VARIANT_MODES = frozenset({"speculative", "hybrid", "hf-assisted"})


@dataclass(frozen=True)
class RunResult:
    token_ids: tuple[int, ...]
    seconds: float
    acceptance_rate: float | None
    mean_accepted: float | None
    #: Tokens the draft model wrote alone while the target's circuit was open, and failed passes.
    degraded_tokens: int = 0
    failed_passes: int = 0

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else 0.0


def run_engine(runtime: Runtime, mode: str, prompt_ids: Sequence[int], params: DecodeParams) -> RunResult:
    finished = list(runtime.generate(prompt_ids, params, ENGINE_MODES[mode], fresh=True))[-1]
    assert isinstance(finished, FinishedEvent)
    summary = finished.summary
    return RunResult(
        finished.token_ids,
        summary.seconds,
        summary.acceptance_rate,
        summary.mean_accepted if mode != "target" else None,
        summary.degraded_tokens,
        summary.target_failures + summary.draft_failures,
    )


@contextlib.contextmanager
def stock_attention(*models: PreTrainedModel) -> Iterator[None]:
    """HF generate runs with transformers' own SDPA attention, as a user of it would get."""
    saved = [m.config._attn_implementation for m in models]
    for model in models:
        model.config._attn_implementation = "sdpa"
    try:
        yield
    finally:
        for model, name in zip(models, saved, strict=True):
            model.config._attn_implementation = name


def run_hf(pair: ModelPair, mode: str, prompt_ids: Sequence[int], params: DecodeParams) -> RunResult:
    target = pair.target.hf_model()
    draft = pair.draft.hf_model() if mode == "hf-assisted" and pair.draft is not None else None
    if mode == "hf-assisted" and draft is None:
        raise ValueError("hf-assisted needs a draft model")
    sampling = params.temperature > 0
    config = GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        do_sample=sampling,
        temperature=params.temperature if sampling else None,
        top_p=params.top_p if sampling else None,
        top_k=None,
        eos_token_id=sorted(pair.target.eos_ids),
        pad_token_id=pair.target.tokenizer.pad_token_id or min(pair.target.eos_ids),
        num_assistant_tokens=params.k if draft is not None else None,
    )
    if params.seed is not None:
        torch.manual_seed(params.seed)
    input_ids = torch.tensor([list(prompt_ids)], device=pair.target.device)
    models = [target] if draft is None else [target, draft]
    with stock_attention(*models), torch.inference_mode():
        start = time.perf_counter()
        output = target.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            generation_config=config,
            assistant_model=draft,
        )
        seconds = time.perf_counter() - start
    return RunResult(tuple(int(t) for t in output[0, input_ids.shape[1] :]), seconds, None, None)


def run_llama(pair: ModelPair, mode: str, prompt_ids: Sequence[int], params: DecodeParams) -> RunResult:
    draft = pair.draft.weights_source() if pair.draft is not None else None
    tokens, seconds = peer(pair.target.weights_source(), draft).run(mode, prompt_ids, params, pair.target.eos_ids)
    return RunResult(tokens, seconds, None, None)


def split_mode(mode: str) -> tuple[str, bool]:
    """A bench mode's engine or HF mode, and whether it runs through the telemetry listener."""
    base, traced = mode.removesuffix(TRACED_SUFFIX), mode.endswith(TRACED_SUFFIX)
    if base not in ALL_MODES or (traced and base not in ENGINE_MODES):
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(ALL_MODES)} "
                         f"(an engine mode may end in {TRACED_SUFFIX})")
    return base, traced


def run_mode(runtime: Runtime, mode: str, prompt_ids: Sequence[int], params: DecodeParams,
             traced: Runtime | None = None) -> RunResult:
    """One run; a ``+telemetry`` mode runs on ``traced`` (the same engine, with the telemetry listener)."""
    base, with_telemetry = split_mode(mode)
    if base in HF_MODES:
        return run_hf(runtime.pair, base, prompt_ids, params)
    if base in LLAMA_MODES:
        return run_llama(runtime.pair, base, prompt_ids, params)
    if with_telemetry:
        if traced is None:
            raise ValueError(f"mode {mode!r} needs a runtime with telemetry")
        runtime = traced
    return run_engine(runtime, base, prompt_ids, params)
