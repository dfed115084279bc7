"""Past chats from the history database; choosing one opens it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from specdec_tui.chat.history import ConversationInfo
from specdec_tui.tui.bindings import key_bindings


def _age(updated: float) -> str:
    minutes = (time.time() - updated) / 60
    if minutes < 60:
        return f"{minutes:.0f}m"
    if minutes < 60 * 48:
        return f"{minutes / 60:.0f}h"
    return f"{minutes / 1440:.0f}d"


class ConversationList(OptionList):
    BINDINGS = key_bindings(scope="chats")  # rename, delete

    @dataclass
    class Opened(Message):
        conversation_id: int

    def show(self, conversations: list[ConversationInfo], current: int | None) -> None:
        self.clear_options()
        for info in conversations:
            age = (f"{info.messages} msgs · {_age(info.updated)} ago", "dim")
            self.add_option(Option(Text.assemble(info.title, "\n", age), id=str(info.id)))
        if current is not None and any(info.id == current for info in conversations):
            self.highlighted = next(i for i, info in enumerate(conversations) if info.id == current)

    @property
    def chosen(self) -> int | None:
        """The highlighted chat's id, if any."""
        if self.highlighted is None:
            return None
        option = self.get_option_at_index(self.highlighted)
        return int(option.id) if option.id is not None else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.post_message(self.Opened(int(event.option.id)))
