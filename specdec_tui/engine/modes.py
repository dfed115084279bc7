"""Decoding modes by name, and the drafter each one builds: the one registry that the settings,
the engine, the bench and the server read.

Drafter classes are imported when a drafter is built, not here, so that validating settings
does not import PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specdec_tui.engine.decoder import DecodeParams
    from specdec_tui.engine.drafters import Drafter
    from specdec_tui.engine.session import Engine

MODEL = "model"
PROMPT_LOOKUP = "prompt-lookup"
HYBRID = "hybrid"
TARGET = "target"


@dataclass(frozen=True)
class Mode:
    name: str
    summary: str
    #: Whether it needs a loaded draft model.
    needs_draft_model: bool
    build: Callable[[Engine, DecodeParams], Drafter | None]


def _model(engine: Engine, params: DecodeParams) -> Drafter:
    from specdec_tui.engine.drafters import ModelDrafter

    assert engine.draft is not None
    return ModelDrafter(engine.draft, engine.vocab_size, params.draft_min_confidence,
                        engine.policy(MODEL, params), branching=engine.target.supports_branches)


def _prompt_lookup(engine: Engine, params: DecodeParams) -> Drafter:
    from specdec_tui.engine.drafters import PromptLookupDrafter

    return PromptLookupDrafter(policy=engine.policy(PROMPT_LOOKUP, params), span=params.lookup_k)


def _hybrid(engine: Engine, params: DecodeParams) -> Drafter:
    from specdec_tui.engine.drafters import HybridDrafter, PromptLookupDrafter

    # Next to a model draft, a copied continuation must match a longer n-gram to be trusted.
    lookup = PromptLookupDrafter(min_ngram=3, policy=engine.policy("strict-lookup", params), span=params.lookup_k)
    model = _model(engine, params)
    return HybridDrafter(lookup, model, engine.policy("copy-after-draft", params))  # type: ignore[arg-type]


MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (
        Mode(MODEL, "the draft model proposes, the target verifies", True, _model),
        Mode(PROMPT_LOOKUP, "copies what followed the context's last n-gram earlier on", False, _prompt_lookup),
        Mode(HYBRID, "prompt lookup when it finds a match, else the draft model", True, _hybrid),
        Mode(TARGET, "the target alone, one token per step", False, lambda engine, params: None),
    )
}
#: The modes that draft: the values ``decoding.drafter`` takes.
DRAFTER_MODES: tuple[str, ...] = tuple(name for name in MODES if name != TARGET)


def check_mode(name: str, choices: tuple[str, ...] = tuple(MODES)) -> str:
    """``name`` if it is one of ``choices``, else a ValueError naming them."""
    if name not in choices:
        raise ValueError(f"unknown mode {name!r}; expected one of {', '.join(choices)}")
    return name
