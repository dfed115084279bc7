"""Loading a model reference into a ready model: resolved, fetched if needed, converted, prepared."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specdec_tui.models.attention import ROW_EXACT, supports_row_exact
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.errors import ModelError
from specdec_tui.models.fast_llama import FastLlama, supports_fast_llama
from specdec_tui.models.hf_runner import HFRunner
from specdec_tui.models.precision import PRECISIONS, PackProgress, apply_precision
from specdec_tui.models.presets import PRESETS
from specdec_tui.models.progress import Progress, ProgressFn, no_progress
from specdec_tui.models.provision import convert_gguf, fetch_preset
from specdec_tui.models.reference import ModelRef, parse_ref

#: What runs a model's forward passes; both keep their own KV cache.
Runner = FastLlama | HFRunner


@dataclass
class LoadedModel:
    name: str
    #: The transformers model; None once the lean forward has packed its own copy of the weights
    #: (``hf_model`` reads it again from ``source`` for the few callers that need it).
    model: PreTrainedModel | None
    runner: Runner
    tokenizer: PreTrainedTokenizerBase
    precision: str
    device: torch.device
    max_context: int
    eos_ids: frozenset[int]
    vocab_size: int
    role: str
    #: Where the weights were read from (a local folder).
    source: str = ""

    def hf_model(self) -> PreTrainedModel:
        """The transformers model at this precision (for Hugging Face generate())."""
        if isinstance(self.runner, HFRunner):
            assert self.model is not None
            return self.model
        if self.model is None:
            self.model = _load_weights(self.source, self.name)[1]
        if not getattr(self.model, "_specdec_prepared", False):
            prepare_model(self.model, self.precision, self.device, self.role == "target")
            self.model._specdec_prepared = True
        return self.model


@dataclass
class ModelPair:
    target: LoadedModel
    draft: LoadedModel | None


def resolve_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(setting)
    except RuntimeError as exc:
        raise ModelError(f"unknown device {setting!r}; use auto, cpu or cuda") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {setting!r} was asked for but no CUDA device is available; use cpu or auto")
    return device


def local_source(ref: ModelRef, cache: ModelCache, progress: ProgressFn) -> str:
    """A folder or hub id that transformers can load ``ref`` from, converting it first if needed."""
    if ref.kind == "preset":
        return str(fetch_preset(PRESETS[ref.value], cache, progress))
    if ref.kind == "gguf":
        key = ref.cache_key
        with cache.lock(key):
            if cache.check(key) is not None:
                convert_gguf(Path(ref.value), cache, key, {"gguf": ref.value}, progress)
        return str(cache.path(key))
    return ref.value


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    for source in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return frozenset(ids)


def context_length(model: PreTrainedModel) -> int:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def prepare_model(
    model: PreTrainedModel,
    precision: str,
    device: torch.device,
    exact: bool = True,
    on_packed: PackProgress = lambda done, total: None,
) -> PreTrainedModel:
    """Put ``model`` in inference mode at ``precision`` on ``device`` with row-exact attention."""
    model.eval()
    model.requires_grad_(False)
    apply_precision(model, precision, device, exact, on_packed)
    if supports_row_exact(model.config):
        model.config._attn_implementation = ROW_EXACT
    return model.to(device)


def make_runner(
    model: PreTrainedModel,
    precision: str,
    device: torch.device,
    exact: bool = True,
    head_tokens: int | None = None,
    keep_tokens: tuple[int, ...] = (),
    on_packed: PackProgress = lambda done, total: None,
) -> Runner:
    """The fastest runner for ``model``: the lean Llama-family forward on CPU, else transformers'.

    ``exact`` is for a target: its verify blocks must compute what single steps compute.
    """
    model.eval()
    model.requires_grad_(False)
    if device.type == "cpu" and supports_fast_llama(model):
        return FastLlama(model, precision, exact, head_tokens, keep_tokens, on_packed)
    return HFRunner(prepare_model(model, precision, device, exact, on_packed))


def release_freed_memory() -> None:
    """Hand memory freed after loading (the fp32 copies) back to the system; glibc keeps it otherwise."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator decides
        pass


def _load_weights(source: str, name: str) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except Exception as exc:  # loaders raise many kinds for a bad file; all mean "cannot load"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load {name}: {reason}") from exc
    return tokenizer, model


def load_model(
    reference: str,
    *,
    precision: str,
    device: torch.device,
    cache: ModelCache,
    progress: ProgressFn = no_progress,
    role: str = "target",
    head_tokens: int | None = None,
) -> LoadedModel:
    """Load ``reference`` as a ``role`` ("target" or "draft"): a target gets exact kernels."""
    if precision not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    ref = parse_ref(reference)
    source = local_source(ref, cache, progress)
    progress(Progress(reference, "load", 0, None, f"reading {ref.kind} {ref.value}"))
    if ref.kind == "hub":
        try:
            tokenizer, model = _load_weights(source, reference)
        except ModelError as exc:
            known = ", ".join(PRESETS)
            raise ModelError(
                f"{reference} is not a preset ({known}), a local folder or a .gguf file, and loading it "
                f"from the Hugging Face hub failed: {exc}"
            ) from exc
    else:
        tokenizer, model = _load_weights(source, reference)
    vocab_size = int(model.config.get_text_config().vocab_size)

    def on_packed(done: int, total: int) -> None:
        progress(Progress(reference, "prepare", done, total, f"packing {precision} weights"))

    eos_ids = eos_token_ids(model, tokenizer)
    specials = tuple(tokenizer.all_special_ids) + tuple(eos_ids)
    runner = make_runner(model, precision, device, role == "target", head_tokens, specials, on_packed)
    loaded = LoadedModel(
        name=reference,
        # The lean forward holds packed copies; keeping the fp32 original too would double the memory.
        model=model if isinstance(runner, HFRunner) else None,
        runner=runner,
        tokenizer=tokenizer,
        precision=precision,
        device=device,
        max_context=context_length(model),
        eos_ids=eos_ids,
        vocab_size=vocab_size,
        role=role,
        source=source,
    )
    del model
    release_freed_memory()
    return loaded


def check_same_tokenizer(draft: LoadedModel, target: LoadedModel) -> None:
    """Speculation compares token ids, so both models must map text to ids the same way."""
    draft_vocab, target_vocab = draft.tokenizer.get_vocab(), target.tokenizer.get_vocab()
    if draft_vocab != target_vocab:
        differing = next(
            (tok for tok, i in target_vocab.items() if draft_vocab.get(tok) != i),
            next(iter(draft_vocab.keys() - target_vocab.keys()), "?"),
        )
        raise ModelError(
            f"draft {draft.name} and target {target.name} use different tokenizers "
            f"({len(draft_vocab)} vs {len(target_vocab)} tokens; first difference at {differing!r}); "
            "pick a draft from the target's model family"
        )


def load_pair(
    target: str,
    draft: str | None,
    *,
    precision: str,
    draft_precision: str,
    device: str,
    cache_dir: Path,
    progress: ProgressFn = no_progress,
    draft_head_tokens: int | None = None,
) -> ModelPair:
    cache = ModelCache(cache_dir)
    resolved = resolve_device(device)
    target_model = load_model(target, precision=precision, device=resolved, cache=cache, progress=progress)
    if draft is None:
        return ModelPair(target_model, None)
    draft_model = load_model(draft, precision=draft_precision, device=resolved, cache=cache, progress=progress,
                             role="draft", head_tokens=draft_head_tokens)
    check_same_tokenizer(draft_model, target_model)
    return ModelPair(target_model, draft_model)
