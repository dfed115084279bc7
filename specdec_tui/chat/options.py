"""A chat's own decoding settings: the defaults come from the settings, a chat may change them,
and the history stores them with the chat so that reopening it restores them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from pydantic import ValidationError

from specdec_tui.config import DecodingSettings, Settings
from specdec_tui.engine.modes import MODES, check_mode

#: The decoding settings a chat can set for itself.
DECODING_FIELDS = ("k", "tau", "temperature", "top_p", "max_new_tokens")


@dataclass(frozen=True)
class ChatOptions:
    system_prompt: str
    #: ``target`` or a drafting mode.
    mode: str
    k: int
    tau: float
    temperature: float
    top_p: float
    max_new_tokens: int

    @classmethod
    def defaults(cls, settings: Settings) -> ChatOptions:
        decoding = settings.decoding
        return cls(settings.chat.system_prompt, decoding.drafter,
                   **{name: getattr(decoding, name) for name in DECODING_FIELDS})

    @classmethod
    def checked(cls, base: DecodingSettings, values: Mapping[str, Any]) -> ChatOptions:
        """Options from ``values`` (strings are fine), validated as the settings are; else a one-line ValueError."""
        try:
            check_mode(str(values["mode"]), tuple(MODES))
            decoding = DecodingSettings.model_validate(
                {**base.model_dump(), **{name: values[name] for name in DECODING_FIELDS}})
        except ValidationError as exc:
            error = exc.errors()[0]
            name = ".".join(str(part) for part in error["loc"])
            raise ValueError(f"{name} = {error.get('input')!r}: {error['msg'][0].lower()}{error['msg'][1:]}") from None
        return cls(str(values["system_prompt"]), str(values["mode"]),
                   **{name: getattr(decoding, name) for name in DECODING_FIELDS})

    @classmethod
    def restored(cls, stored: Mapping[str, Any] | None, defaults: ChatOptions, base: DecodingSettings) -> ChatOptions:
        """What a chat stored, over ``defaults``; a stored set that no longer validates gives the defaults."""
        known = {f.name for f in fields(cls)}
        values = {**asdict(defaults), **{k: v for k, v in (stored or {}).items() if k in known}}
        try:
            return cls.checked(base, values)
        except ValueError:
            return defaults

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
