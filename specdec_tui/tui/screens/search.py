"""Search every chat's messages (SQLite FTS5); choosing a hit opens its chat."""

from __future__ import annotations

import re

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from specdec_tui.chat.history import History, HistoryError


def hit_text(title: str, who: str, snippet: str) -> Text:
    """A hit as the list shows it: the chat's title, who wrote it, and the snippet, matched words marked."""
    text = Text.assemble((title, "bold"), f" · {who}\n  ")
    for i, part in enumerate(re.split(r"\[([^\]]*)\]", " ".join(snippet.split()))):
        text.append(part, style="reverse" if i % 2 else "")
    return text


class SearchScreen(ModalScreen[int | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close"), Binding("down", "results", "Results", show=False)]

    def __init__(self, history: History) -> None:
        super().__init__()
        self.history = history
        #: Each listed hit's option id -> its chat.
        self.chats: dict[str, int] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="search"):
            yield Label("Search all chats", id="search-title")
            yield Input(placeholder="words to find (each must appear)", id="search-input")
            yield Label("", id="search-count")
            yield OptionList(id="search-results")

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        results = self.query_one(OptionList)
        results.clear_options()
        self.chats = {}
        try:
            hits = self.history.search(event.value)
        except HistoryError as exc:
            self.query_one("#search-count", Label).update(str(exc))
            return
        for hit in hits:
            who = "You" if hit.role == "user" else "Assistant"
            self.chats[str(hit.message_id)] = hit.conversation_id
            results.add_option(Option(hit_text(hit.title, who, hit.snippet), id=str(hit.message_id)))
        count = f"{len(hits)} messages" if event.value.strip() else ""
        self.query_one("#search-count", Label).update(count)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        results = self.query_one(OptionList)
        if results.option_count:
            results.highlighted = results.highlighted or 0
            results.focus()

    def action_results(self) -> None:
        self._submitted()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.chats.get(event.option.id or ""))
