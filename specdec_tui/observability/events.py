"""What a reply listener is given: the reply's event stream and what is known about the reply."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from specdec_tui.engine.decoder import DecodeParams, Event


@dataclass(frozen=True)
class ReplyInfo:
    prompt_ids: Sequence[int]
    params: DecodeParams
    mode: str
    target: str
    draft: str | None
    #: The GenAI operation: ``chat`` or ``text_completion``.
    operation: str = "chat"
    conversation_id: str | None = None
    #: The conversation the reply answers, when it came as chat messages.
    messages: Sequence[dict[str, str]] | None = None
    #: A trace context to nest the reply's span under (a server request's), if any.
    parent: object | None = None


#: Watches a reply: takes its events and yields the same events, in order, unchanged.
ReplyListener = Callable[[Iterator[Event], ReplyInfo], Iterator[Event]]
