"""The keys, in one place (also in the footer and the README)."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static

EDITING_KEYS = (
    ("Enter", "send the message"),
    ("Ctrl+J", "new line in the message"),
    ("↑ / ↓", "earlier / later prompts (on the first / last line)"),
    ("Ctrl+P", "command palette: every action, and the theme"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.app_bindings = bindings

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for key, what in EDITING_KEYS:
            table.add_row(key, what)
        for binding in self.app_bindings:
            table.add_row(binding.key_display or binding.key, binding.description)
        with Vertical(id="help"):
            yield Label("Keys", id="help-title")
            yield Static(table)
            yield Label("Esc to close", id="help-hint")
