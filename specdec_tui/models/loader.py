"""Loading a model reference into a ready model: resolved, fetched if needed, packed, prepared.

A preset or a .gguf file is packed once for its role and precision into its own cache entry
(``packed.safetensors`` with the tokenizer and config beside it). Later loads memory-map that file
and use its tensors in place: no transformers model, no fp32 copy, no packing, and only the pages
that are read become resident. A model from a GGUF file keeps that file's quantized embedding
table (``embedding``), a fraction of its fp32 size.
"""

from __future__ import annotations

import ctypes
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedTokenizerBase,
)

from specdec_tui.models import quantized_kernels
from specdec_tui.models.attention import use_row_exact
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.embedding import DenseEmbedding, gguf_embedding
from specdec_tui.models.errors import ModelError
from specdec_tui.models.fast_llama import FastLlama, supports_config, supports_fast_llama
from specdec_tui.models.gguf_weights import AS_STORED, GgufWeights
from specdec_tui.models.hf_runner import HFRunner
from specdec_tui.models.kv_cache import KV_CACHE_DTYPES
from specdec_tui.models.precision import PRECISIONS, PackProgress, apply_precision
from specdec_tui.models.presets import PRESETS
from specdec_tui.models.progress import Progress, ProgressFn, no_progress
from specdec_tui.models.provision import PRESET_GGUF, fetch_preset, gguf_tensor_progress
from specdec_tui.models.q4k import Q4kTensors
from specdec_tui.models.reference import ModelRef, parse_ref

if TYPE_CHECKING:
    # transformers' modeling stack takes seconds to import; a load from the packed cache never needs it.
    from transformers import PreTrainedModel

#: What runs a model's forward passes; both keep their own KV cache.
Runner = FastLlama | HFRunner

PACKED_WEIGHTS = "packed.safetensors"
#: What a tokenizer is made from: packed entries whose files match share one tokenizer object.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: Tokenizers already made in this load, by ``ModelCache.digest`` of their files.
Tokenizers = dict[str, PreTrainedTokenizerBase]
#: Precisions whose packed linears can be stored (fbgemm's packed fp16 lives only in memory).
STORED_PRECISIONS = frozenset({"int8", "int4", "fp32"})


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
    #: Where the weights were read from: a folder, a file, or a preset's GGUF in ``cache`` (which
    #: packing removes; ``weights_source`` fetches it again).
    source: str = ""
    cache: ModelCache | None = None

    def weights_source(self, progress: ProgressFn = no_progress) -> str:
        """``source``, fetched again first where it is a preset's GGUF that is no longer cached."""
        ref = parse_ref(self.name)
        if ref.kind == "preset" and self.cache is not None:
            return local_source(ref, self.cache, progress)
        return self.source

    def hf_model(self) -> PreTrainedModel:
        """The transformers model at this precision (for Hugging Face generate())."""
        if isinstance(self.runner, HFRunner):
            assert self.model is not None
            return self.model
        if self.model is None:
            self.model = _load_weights(self.weights_source(), self.name)[1]
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
    """Where transformers reads ``ref`` from: a .gguf file (a preset's is fetched first), a folder
    or a hub id."""
    if ref.kind == "preset":
        return str(fetch_preset(PRESETS[ref.value], cache, progress))
    return ref.value


def source_path(ref: ModelRef, cache: ModelCache) -> str:
    """``local_source`` without fetching anything: where the weights are, or will be once fetched."""
    return str(cache.path(ref.value) / PRESET_GGUF) if ref.kind == "preset" else ref.value


def drop_preset_gguf(cache: ModelCache, name: str, progress: ProgressFn) -> None:
    """Remove preset ``name``'s GGUF once a packed entry is made from it: a start loads only the
    packed entry, and keeping both would more than double the disk the pair takes."""
    with cache.lock(name):
        if cache.remove(name):
            progress(Progress(name, "prepare", 0, None,
                              "removed the GGUF it was packed from (fetched again if ever needed)"))


def packed_key(ref: ModelRef, precision: str, role: str, device: torch.device) -> str | None:
    """The cache entry holding ``ref`` packed for ``role`` at ``precision``, or None where none is
    kept: a folder's or hub model's files can change behind the cache, and only the CPU forward packs."""
    if ref.kind not in ("preset", "gguf") or device.type != "cpu" or precision not in STORED_PRECISIONS:
        return None
    if precision in ("int8", "int4") and not quantized_kernels.available():
        return None
    return f"{ref.cache_key}.{role}-{precision}"


def eos_token_ids(generation: GenerationConfig, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    for source in (generation.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return frozenset(ids)


def context_length(config: PretrainedConfig) -> int:
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
    use_row_exact(model.config)
    return model.to(device)


def make_runner(
    model: PreTrainedModel,
    precision: str,
    device: torch.device,
    exact: bool = True,
    on_packed: PackProgress = lambda done, total: None,
    gguf: GgufWeights | None = None,
) -> Runner:
    """The fastest runner for ``model``: the lean Llama-family forward on CPU, else transformers'.

    ``exact`` is for a target: its verify blocks must compute what single steps compute. ``gguf``:
    the file ``model`` was read from, whose Q4_K tensors the lean forward also keeps as indices.
    """
    model.eval()
    model.requires_grad_(False)
    if device.type == "cpu" and supports_fast_llama(model):
        q4k = Q4kTensors(gguf) if gguf is not None and precision == "int8" else None
        return FastLlama.from_model(model, precision, exact, on_packed, q4k)
    return HFRunner(prepare_model(model, precision, device, exact, on_packed))


def release_freed_memory() -> None:
    """Hand memory freed after loading (the fp32 copies) back to the system; glibc keeps it otherwise."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator decides
        pass


def _load_weights(
    source: str, name: str, progress: ProgressFn = no_progress
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    from transformers import AutoModelForCausalLM

    path = Path(source)
    try:
        if path.suffix.lower() == ".gguf":
            with gguf_tensor_progress(name, progress):
                tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
                model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
            # Dequantized, the model is plain fp32, but transformers still marks it quantized, which
            # refuses .float() (apply_precision) and saving.
            model.hf_quantizer = None
            model.__dict__.pop("is_quantized", None)
            model.__dict__.pop("quantization_method", None)
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
        else:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except Exception as exc:  # loaders raise many kinds for a bad file; all mean "cannot load"
        raise ModelError(f"cannot load {name}: {first_line(exc)}") from exc
    return tokenizer, model


def _transformers_model(ref: ModelRef, source: str, name: str, progress: ProgressFn) -> tuple[
        PreTrainedTokenizerBase, PreTrainedModel]:
    """``_load_weights``, a failed hub load naming what else a reference can be."""
    if ref.kind != "hub":
        return _load_weights(source, name, progress)
    try:
        return _load_weights(source, name)
    except ModelError as exc:
        raise ModelError(
            f"{name} is not a preset ({', '.join(PRESETS)}), a local folder or a .gguf file, and loading it "
            f"from the Hugging Face hub failed: {exc}"
        ) from exc


def read_gguf(path: Path, name: str) -> GgufWeights:
    """GGUF file ``path``'s header, read once for every use of the file a load makes."""
    try:
        return GgufWeights(path)
    except Exception as exc:  # readers raise many kinds for a bad file; all mean "cannot load"
        raise ModelError(f"cannot load {name}: {first_line(exc)}") from exc


def pack_gguf(weights: GgufWeights, name: str, precision: str, exact: bool, progress: ProgressFn = no_progress,
              tokenizers: Tokenizers | None = None) -> tuple[
        PreTrainedTokenizerBase, PretrainedConfig, GenerationConfig, FastLlama] | None:
    """The tokenizer, configurations and lean forward of GGUF file ``weights``, packed straight from
    the file (``FastLlama.from_gguf``); None where that would not give transformers' numbers (another
    architecture) or the lean forward does not run the model. The tokenizer is the one in
    ``tokenizers`` made from a file of the same tokenizer digest, if any (and is kept there)."""
    if weights.architecture not in AS_STORED:
        return None
    try:
        config = gguf_config(weights)
        if not supports_config(config):
            return None
        config.dtype = torch.float32  # what the forward computes in, as a model loaded in float32 says
        tokenizer = gguf_tokenizer(weights, {} if tokenizers is None else tokenizers, config.model_type)

        converting = f"dequantizing and packing {precision} weights"

        def on_packed(done: int, total: int) -> None:
            # Each linear's float temporaries are freed among the packed ones kept: without handing
            # them back, the target's packing held 1.3 GB more at its end.
            release_freed_memory()
            progress(Progress(name, "convert", done, total, converting))

        progress(Progress(name, "convert", 0, None, converting))
        q4k = Q4kTensors(weights) if precision == "int8" else None
        runner = FastLlama.from_gguf(weights, config, precision, exact, on_packed, q4k)
    except Exception as exc:  # readers raise many kinds for a bad file; all mean "cannot load"
        raise ModelError(f"cannot load {name}: {first_line(exc)}") from exc
    return tokenizer, config, GenerationConfig.from_model_config(config), runner


def gguf_config(weights: GgufWeights) -> PretrainedConfig:
    """GGUF file ``weights``' configuration as transformers makes it, read from a copy of the header
    without the tokenizer's arrays (``GgufHeader.config_copy``: 0.03 s against 8.5-9 s a file)."""
    with tempfile.TemporaryDirectory(prefix="specdec-gguf-") as folder:
        copy = weights.header.config_copy(Path(folder) / weights.path.name)
        config = AutoConfig.from_pretrained(copy.parent, gguf_file=copy.name)
    config._name_or_path = str(weights.path.parent)
    return config


def gguf_tokenizer(weights: GgufWeights, tokenizers: Tokenizers, model_type: str) -> PreTrainedTokenizerBase:
    """GGUF file ``weights``' tokenizer: made by transformers from the file, unless ``tokenizers`` has
    one made from a file of the same tokenizer digest (a pair's second file). Told the model type,
    transformers does not read the file's configuration again through gguf's reader first: 1 s instead
    of 10 for the default target, the same tokenizer."""
    key = f"gguf:{weights.tokenizer_digest}"
    if key not in tokenizers:
        tokenizers[key] = AutoTokenizer.from_pretrained(weights.path.parent, gguf_file=weights.path.name,
                                                        tokenizer_type=model_type)
    return tokenizers[key]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def store_packed(cache: ModelCache, key: str, runner: FastLlama, tokenizer: PreTrainedTokenizerBase,
                 config: PretrainedConfig, generation: GenerationConfig, source: dict) -> None:
    """Write ``runner``'s packed tensors with the tokenizer and config as cache entry ``key``, unless
    its linears cannot be stored. A failed write (a full disk) is the caller's to report."""
    state = runner.packed_state()
    if state is None:
        return
    tensors, meta = state
    with cache.lock(key), cache.building(key, source) as scratch:
        save_file(tensors, str(scratch / PACKED_WEIGHTS), metadata={"specdec": json.dumps(meta)})
        tokenizer.save_pretrained(scratch)
        config.save_pretrained(scratch)
        generation.save_pretrained(scratch)


def load_packed(cache: ModelCache, key: str, name: str, tokenizers: Tokenizers) -> tuple[
        PreTrainedTokenizerBase, PretrainedConfig, GenerationConfig, FastLlama]:
    """The tokenizer, config and memory-mapped forward of packed cache entry ``key``."""
    folder = cache.path(key)
    try:
        digest = cache.digest(key, TOKENIZER_FILES)
        # A draft of the target's family has the target's tokenizer files: made once, it is a
        # second or two of every start. (Only the target's chat template is ever used.)
        tokenizer = tokenizers.get(digest) if digest else None
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            if digest:
                tokenizers[digest] = tokenizer
        config = AutoConfig.from_pretrained(folder)
        generation = GenerationConfig.from_pretrained(folder)
        with safe_open(folder / PACKED_WEIGHTS, "pt") as handle:
            meta = json.loads(handle.metadata()["specdec"])
        runner = FastLlama.from_packed(load_file(folder / PACKED_WEIGHTS), meta)
    except Exception as exc:  # a damaged entry: the caller packs it again
        raise ModelError(f"cannot load the packed {name}: {first_line(exc)}") from exc
    return tokenizer, config, generation, runner


def shared_tokenizer(cache: ModelCache, key: str, tokenizer: PreTrainedTokenizerBase,
                     tokenizers: Tokenizers | None) -> PreTrainedTokenizerBase:
    """The tokenizer this load already made from the same files as entry ``key``'s, else ``tokenizer``
    (kept for the loads after it): a first start shares the pair's tokenizer as later starts do."""
    digest = cache.digest(key, TOKENIZER_FILES)
    if tokenizers is None or not digest:
        return tokenizer
    return tokenizers.setdefault(digest, tokenizer)


def load_model(
    reference: str,
    *,
    precision: str,
    device: torch.device,
    cache: ModelCache,
    progress: ProgressFn = no_progress,
    role: str = "target",
    head_tokens: int | None = None,
    tokenizers: Tokenizers | None = None,
    kv_cache: str = "float32",
    lean: bool = False,
) -> LoadedModel:
    """Load ``reference`` as a ``role`` ("target" or "draft"): a target gets exact kernels, and the
    package's forward keeps its keys and values in ``kv_cache`` ("float16" or "float32"). ``lean``:
    where this processor reads indexed int8 linears' indices, their int8 blocks are dropped
    (``FastLlama.drop_int8_blocks``).

    Loads that pass the same ``tokenizers`` share a tokenizer where their files are the same."""
    if kv_cache not in KV_CACHE_DTYPES:
        raise ModelError(f"unknown kv_cache {kv_cache!r}; expected one of {', '.join(KV_CACHE_DTYPES)}")
    if precision not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    ref = parse_ref(reference)
    key = packed_key(ref, precision, role, device)
    if key is not None and cache.check(key) is None:
        progress(Progress(reference, "load", 0, None, f"mapping the packed {precision} weights"))
        try:
            tokenizer, config, generation, runner = load_packed(cache, key, reference,
                                                                {} if tokenizers is None else tokenizers)
        except ModelError as exc:
            progress(Progress(reference, "rebuild", 0, None, f"{exc}; packing it again"))
        else:
            return _loaded(reference, None, runner, tokenizer, config, generation, precision, device, role,
                           source_path(ref, cache), cache, head_tokens, kv_cache, lean, progress)
    source = local_source(ref, cache, progress)
    progress(Progress(reference, "load", 0, None, f"reading {ref.kind} {ref.value}"))
    is_gguf = Path(source).suffix.lower() == ".gguf"
    # Only the lean forward, on the CPU, reads the file's own tensors.
    gguf = read_gguf(Path(source), reference) if is_gguf and device.type == "cpu" else None
    from_gguf = pack_gguf(gguf, reference, precision, role == "target", progress, tokenizers) if gguf is not None else None
    model: PreTrainedModel | None = None
    if from_gguf is not None:
        tokenizer, config, generation, runner = from_gguf
    else:
        tokenizer, model = _transformers_model(ref, source, reference, progress)

        def on_packed(done: int, total: int) -> None:
            progress(Progress(reference, "prepare", done, total, f"packing {precision} weights"))

        runner = make_runner(model, precision, device, role == "target", on_packed, gguf)
        if isinstance(runner, FastLlama) and gguf is not None:
            assert isinstance(runner.embedding, DenseEmbedding)
            runner.embedding = gguf_embedding(gguf, runner.embedding.weight) or runner.embedding
        config, generation = model.config, model.generation_config
    if key is not None and isinstance(runner, FastLlama):
        progress(Progress(reference, "prepare", 0, None, "storing the packed weights for the next start"))
        try:
            store_packed(cache, key, runner, tokenizer, config, generation,
                         {"packed_from": reference, "role": role, "precision": precision})
        except ModelError as exc:  # the model is loaded; only the next start is slower
            progress(Progress(reference, "prepare", 0, None, f"the packed weights were not stored: {exc}"))
        else:
            tokenizer = shared_tokenizer(cache, key, tokenizer, tokenizers)
            if ref.kind == "preset":
                drop_preset_gguf(cache, ref.value, progress)
    # The lean forward holds packed copies; keeping the fp32 original too would double the memory.
    kept = model if isinstance(runner, HFRunner) else None
    loaded = _loaded(reference, kept, runner, tokenizer, config, generation, precision, device,
                     role, source, cache, head_tokens, kv_cache, lean, progress)
    del model
    release_freed_memory()
    return loaded


def _loaded(name: str, model: PreTrainedModel | None, runner: Runner, tokenizer: PreTrainedTokenizerBase,
            config: PretrainedConfig, generation: GenerationConfig, precision: str, device: torch.device,
            role: str, source: str, cache: ModelCache, head_tokens: int | None = None,
            kv_cache: str = "float32", lean: bool = False, progress: ProgressFn = no_progress) -> LoadedModel:
    eos_ids = eos_token_ids(generation, tokenizer)
    if isinstance(runner, FastLlama):
        runner.keep_kv_in(KV_CACHE_DTYPES[kv_cache])
        if lean:
            _drop_int8_blocks(name, runner, progress)
        if head_tokens:
            runner.limit_head(head_tokens, always=(*tokenizer.all_special_ids, *eos_ids))
    return LoadedModel(
        name=name,
        model=model,
        runner=runner,
        tokenizer=tokenizer,
        precision=precision,
        device=device,
        max_context=context_length(config),
        eos_ids=eos_ids,
        vocab_size=int(config.get_text_config().vocab_size),
        role=role,
        source=source,
        cache=cache,
    )


def _drop_int8_blocks(name: str, runner: FastLlama, progress: ProgressFn) -> None:
    if not quantized_kernels.reads_indices():
        progress(Progress(name, "load", 0, None, "lean: this processor reads the int8 blocks "
                          "(the indices need AVX-512 VNNI), so they stay"))
        return
    dropped = runner.drop_int8_blocks()
    progress(Progress(name, "load", 0, None, f"lean: {dropped} linears read only their indices" if dropped else
                      "lean: no linear holds indices (an int8 target packed from a GGUF's Q4_K tensors does)"))


def check_same_tokenizer(draft: LoadedModel, target: LoadedModel) -> None:
    """Speculation compares token ids, so both models must map text to ids the same way."""
    if draft.tokenizer is target.tokenizer:
        return
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
    kv_cache: str = "float32",
    draft_kv_cache: str | None = None,
    lean_target: bool = False,
) -> ModelPair:
    """The ``target`` and its ``draft`` (None: target only), their caches' elements ``kv_cache`` and
    ``draft_kv_cache`` (None: ``kv_cache``). ``lean_target``: ``load_model``'s ``lean`` for the target."""
    cache = ModelCache(cache_dir)
    resolved = resolve_device(device)
    tokenizers: Tokenizers = {}
    target_model = load_model(target, precision=precision, device=resolved, cache=cache, progress=progress,
                              tokenizers=tokenizers, kv_cache=kv_cache, lean=lean_target)
    if draft is None:
        return ModelPair(target_model, None)
    return ModelPair(target_model, load_draft(target_model, draft, precision=draft_precision, cache=cache,
                                              progress=progress, head_tokens=draft_head_tokens,
                                              tokenizers=tokenizers, kv_cache=draft_kv_cache or kv_cache))


def load_draft(target: LoadedModel, draft: str, *, precision: str, cache: ModelCache,
               progress: ProgressFn = no_progress, head_tokens: int | None = None,
               tokenizers: Tokenizers | None = None, kv_cache: str = "float32") -> LoadedModel:
    """``draft`` loaded to draft for ``target`` (on its device), checked to share its tokenizer."""
    draft_model = load_model(draft, precision=precision, device=target.device, cache=cache, progress=progress,
                             role="draft", head_tokens=head_tokens, tokenizers=tokenizers, kv_cache=kv_cache)
    check_same_tokenizer(draft_model, target)
    return draft_model
