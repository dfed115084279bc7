"""llama.cpp as the peer to beat: the same pair's GGUF files, run through llama-cpp-python.

The modes decode the prompt's very token ids (our chat template's), greedily, to the same number
of new tokens, on as many threads as torch uses. llama.cpp runs the GGUF files' own quantized
blocks (Q4_K_M here), so its text differs from ours: only its speed is comparable.

- ``llama.cpp-target``: the target alone.
- ``llama.cpp-draft``: llama-cpp-python's speculative decoding with the draft GGUF proposing
  ``k`` tokens a step (the draft is a second llama.cpp model, decoding greedily after the tokens
  the target has kept); the target verifies them in one batch.
- ``llama.cpp-lookup``: its prompt-lookup drafter (``LlamaPromptLookupDecoding``), ``k`` tokens.

The speculative modes need every position's logits (``logits_all``), so their prompt pass computes
the output head for every prompt token; that is how llama-cpp-python verifies drafts.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec_tui.engine.decoder import DecodeParams

LLAMA_MODES = ("llama.cpp-target", "llama.cpp-draft", "llama.cpp-lookup")
#: The context each llama.cpp model is given: the bench's prompts and replies fit in it.
CONTEXT = 4096


class LlamaCppError(RuntimeError):
    """A llama.cpp mode that cannot run (no GGUF files, or llama-cpp-python missing)."""


def _llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise LlamaCppError("the llama.cpp modes need llama-cpp-python: pip install 'specdec-tui[peers]'") from exc
    return llama_cpp


def _model(path: str, speculative: bool) -> Any:
    llama_cpp = _llama_cpp()
    return llama_cpp.Llama(model_path=path, n_ctx=CONTEXT, n_threads=torch.get_num_threads(),
                           n_threads_batch=torch.get_num_threads(), logits_all=speculative, verbose=False)


class GgufDraft:
    """A llama-cpp-python draft model: a second llama.cpp model proposing ``k`` greedy tokens."""

    def __init__(self, path: str) -> None:
        self.model = _model(path, speculative=False)
        self.k = 4

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        proposals: list[int] = []
        # generate() keeps the longest prefix it has already evaluated, so only new tokens are read.
        for token in self.model.generate(input_ids.tolist(), temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            proposals.append(int(token))
            if len(proposals) == self.k:
                break
        return np.array(proposals, dtype=np.intc)


class LlamaCppPeer:
    """llama.cpp models of one pair, made as the modes first need them."""

    def __init__(self, target_gguf: str, draft_gguf: str | None) -> None:
        for path in (target_gguf, draft_gguf):
            if path is not None and Path(path).suffix.lower() != ".gguf":
                raise LlamaCppError(f"the llama.cpp modes run GGUF files; {path} is not one "
                                    "(use a preset or a .gguf model)")
        self.target_gguf, self.draft_gguf = target_gguf, draft_gguf

    @functools.cached_property
    def plain(self) -> Any:
        return _model(self.target_gguf, speculative=False)

    @functools.cached_property
    def drafted(self) -> Any:
        if self.draft_gguf is None:
            raise LlamaCppError("llama.cpp-draft needs a draft model")
        model = _model(self.target_gguf, speculative=True)
        model.draft_model = GgufDraft(self.draft_gguf)
        return model

    @functools.cached_property
    def lookup(self) -> Any:
        model = _model(self.target_gguf, speculative=True)
        model.draft_model = _llama_cpp().llama_speculative.LlamaPromptLookupDecoding(max_ngram_size=3)
        return model

    def model_for(self, mode: str, k: int) -> Any:
        if mode == "llama.cpp-target":
            return self.plain
        model = self.drafted if mode == "llama.cpp-draft" else self.lookup
        if isinstance(model.draft_model, GgufDraft):
            model.draft_model.k = k
        else:
            model.draft_model.num_pred_tokens = k
        return model

    def run(self, mode: str, prompt_ids: Sequence[int], params: DecodeParams,
            eos_ids: frozenset[int]) -> tuple[tuple[int, ...], float]:
        """The reply's token ids and the seconds it took, from a fresh cache."""
        if params.temperature > 0:
            raise LlamaCppError("the llama.cpp modes are measured greedily; use --temperature 0")
        model = self.model_for(mode, params.k)
        model.reset()
        if isinstance(model.draft_model, GgufDraft):
            model.draft_model.model.reset()
        tokens: list[int] = []
        start = time.perf_counter()
        for token in model.generate(list(prompt_ids), temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            if int(token) in eos_ids:
                break
            tokens.append(int(token))
            if len(tokens) == params.max_new_tokens:
                break
        return tuple(tokens), time.perf_counter() - start


@functools.cache
def peer(target_gguf: str, draft_gguf: str | None) -> LlamaCppPeer:
    """One peer per pair for the whole run: loading a model is not part of any timed run."""
    return LlamaCppPeer(target_gguf, draft_gguf)
