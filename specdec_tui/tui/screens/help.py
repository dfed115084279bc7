"""The keys as they are bound now: the message box's own, then the chat's (``[keys]`` applied)."""

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

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        """``keys``: (key as shown, what it does) for each of the chat's bindings."""
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for key, what in EDITING_KEYS:
            table.add_row(key, what)
        for key, what in self.keys:
            table.add_row(key, what)
        with Vertical(id="help"):
            yield Label("Keys", id="help-title")
            yield Static(table, id="help-keys")
            yield Label("Esc to close", id="help-hint")
