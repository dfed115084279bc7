"""The engine a caller drives: a target, an optional draft model, their caches and the drafters."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Literal

from transformers import PreTrainedTokenizerBase

from specdec_tui.engine.cached_model import CachedModel, Runner
from specdec_tui.engine.decoder import DecodeParams, Event, SpeculativeDecoder
from specdec_tui.engine.drafters import Drafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_tui.engine.policy import DraftPolicy

Mode = Literal["model", "prompt-lookup", "hybrid", "target"]
MODES: tuple[str, ...] = ("model", "prompt-lookup", "hybrid", "target")


class Engine:
    def __init__(
        self,
        target: Runner,
        tokenizer: PreTrainedTokenizerBase,
        *,
        draft: Runner | None,
        eos_ids: frozenset[int],
        max_context: int,
        vocab_size: int,
        min_confidence: float = 0.0,
        adaptive: bool = True,
    ) -> None:
        """``adaptive`` lets each drafter pick its draft's length (up to K) by expected speed."""
        self.tokenizer = tokenizer
        self.target = CachedModel(target)
        self.draft = CachedModel(draft) if draft is not None else None
        self.decoder = SpeculativeDecoder(self.target, tokenizer, eos_ids, max_context)

        def policy() -> DraftPolicy | None:
            return DraftPolicy(self.decoder.verify_cost) if adaptive else None

        self.lookup = PromptLookupDrafter(policy=policy())
        # Next to a model draft, a copied continuation must match a longer n-gram to be trusted.
        self.strict_lookup = PromptLookupDrafter(min_ngram=3, policy=policy())
        self.model_drafter = (
            ModelDrafter(self.draft, vocab_size, min_confidence, policy()) if self.draft is not None else None
        )

    def drafter(self, mode: str) -> Drafter | None:
        """The drafter for ``mode``; None for target-only decoding."""
        if mode == "target":
            return None
        if mode == "prompt-lookup":
            return self.lookup
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if self.model_drafter is None:
            raise ValueError(f"mode {mode!r} needs a draft model, and none is loaded")
        return self.model_drafter if mode == "model" else HybridDrafter(self.strict_lookup, self.model_drafter)

    def reset(self) -> None:
        """Forget both KV caches, so the next reply starts from an empty context."""
        self.target.reset()
        if self.draft is not None:
            self.draft.reset()

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: DecodeParams,
        mode: str = "model",
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream one reply. Caches are reused where the prompt repeats what they hold."""
        return self.decoder.generate(prompt_ids, params, self.drafter(mode), cancel)
