"""Pick any message of the chat, or any code block in a reply, to copy."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
PREVIEW = 60


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block in ``text``; an unclosed last block counts."""
    return [(lang.strip(), code.rstrip("\n")) for lang, code in FENCE.findall(text)]


def _preview(text: str) -> str:
    line = next((line for line in text.splitlines() if line.strip()), "")
    return (line[:PREVIEW] + "…") if len(line) > PREVIEW or text.count("\n") else line


def copy_choices(messages: Sequence[dict[str, str]]) -> list[tuple[str, str]]:
    """(what the list shows, the text copied): each message, then each code block under its reply."""
    choices = []
    for message in messages:
        who = "You" if message["role"] == "user" else "Assistant"
        choices.append((f"{who}: {_preview(message['content'])}", message["content"]))
        if message["role"] == "assistant":
            for lang, code in code_blocks(message["content"]):
                choices.append((f"    code{f' ({lang})' if lang else ''}: {_preview(code)}", code))
    return choices


class CopyScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, messages: Sequence[dict[str, str]]) -> None:
        super().__init__()
        self.choices = copy_choices(messages)

    def compose(self) -> ComposeResult:
        with Vertical(id="copy-pick"):
            yield Label("Copy: choose a message or a code block", id="copy-title")
            yield OptionList(*[Option(Text(shown), id=str(i)) for i, (shown, _) in enumerate(self.choices)], id="copy-list")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = len(self.choices) - 1 if self.choices else None
        options.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[int(event.option.id or 0)][1])
