"""The message box: Enter sends, Ctrl+J inserts a newline, Up/Down recall earlier prompts."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = frozenset({"ctrl+j", "shift+enter", "alt+enter"})


class PromptInput(TextArea):
    @dataclass
    class Submitted(Message):
        text: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(placeholder="Message  (Enter send · Ctrl+J newline · ↑ earlier prompts)",
                         show_line_numbers=False, soft_wrap=True, tab_behavior="focus", compact=True, **kwargs)
        self.sent: list[str] = []
        self.recall_index: int | None = None
        self.draft_text = ""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text.strip()
            if text:
                self.remember(text)
                self.clear()
                self.post_message(self.Submitted(text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)

    def remember(self, text: str) -> None:
        if not self.sent or self.sent[-1] != text:
            self.sent.append(text)
        self.recall_index = None

    def _show(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    def action_cursor_up(self, select: bool = False) -> None:
        if select or self.cursor_location[0] > 0 or not self.sent:
            super().action_cursor_up(select)
            return
        if self.recall_index is None:
            self.draft_text, self.recall_index = self.text, len(self.sent)
        self.recall_index = max(0, self.recall_index - 1)
        self._show(self.sent[self.recall_index])

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if select or self.cursor_location[0] < last_row or self.recall_index is None:
            super().action_cursor_down(select)
            return
        self.recall_index += 1
        if self.recall_index >= len(self.sent):
            self.recall_index = None
            self._show(self.draft_text)
        else:
            self._show(self.sent[self.recall_index])
