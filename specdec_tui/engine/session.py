"""The engine a caller drives: a target, an optional draft model, their caches and the drafters."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from transformers import PreTrainedTokenizerBase

from specdec_tui.engine.cached_model import CachedModel, Runner
from specdec_tui.engine.decoder import DecodeParams, Event, SpeculativeDecoder
from specdec_tui.engine.drafters import Drafter, ModelDrafter
from specdec_tui.engine.modes import MODES, check_mode
from specdec_tui.engine.policy import DraftPolicy


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
        draft_window: int = 0,
    ) -> None:
        """``draft_window``: of a long context the draft reads only the start and about the last that
        many tokens (``CachedModel.window``; 0: all of it)."""
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.target = CachedModel(target)
        self.draft = CachedModel(draft, draft_window) if draft is not None else None
        self.decoder = SpeculativeDecoder(self.target, tokenizer, eos_ids, max_context)
        if self.draft is not None:
            self.decoder.fallback = ModelDrafter(self.draft, vocab_size)
        #: Each drafter's acceptance and cost estimates, kept across replies (see ``DraftPolicy``).
        self.policies: dict[str, DraftPolicy] = {}

    @property
    def max_context(self) -> int:
        return self.decoder.max_context

    def policy(self, drafter: str, params: DecodeParams) -> DraftPolicy | None:
        """The lasting length policy of ``drafter`` when ``params`` ask for adaptive K, else None."""
        if not params.adaptive_k:
            return None
        return self.policies.setdefault(drafter, DraftPolicy(self.decoder.verify_cost))

    def drafter(self, mode: str, params: DecodeParams) -> Drafter | None:
        """The drafter for ``mode``; None for target-only decoding."""
        spec = MODES[check_mode(mode)]
        if spec.needs_draft_model and self.draft is None:
            raise ValueError(f"mode {mode!r} needs a draft model, and none is loaded")
        return spec.build(self, params)

    def reset(self) -> None:
        """Forget both KV caches, so the next reply starts from an empty context."""
        self.target.reset()
        if self.draft is not None:
            self.draft.reset()

    def keep_shared(self, prompt_ids: Sequence[int]) -> None:
        """Crop both caches to what they share with ``prompt_ids``, as the reply to them would: so that
        what the caches will hold is known before the reply (a draft that reads some ids as others may
        be cropped shorter than its pass would, costing that pass a few positions)."""
        self.target.keep_shared(prompt_ids)
        if self.draft is not None:
            self.draft.keep_shared(prompt_ids)

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: DecodeParams,
        mode: str = "model",
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream one reply. Caches are reused where the prompt repeats what they hold."""
        return self.decoder.generate(prompt_ids, params, self.drafter(mode, params), cancel)
