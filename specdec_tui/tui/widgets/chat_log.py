"""The scrolling conversation: follows a streaming reply unless the reader has scrolled up."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from specdec_tui.tui.widgets.message_view import MessageView

WELCOME = """Type a message and press Enter.

The reply is written by the target model, sped up by the draft: the side panel shows, live, how many drafted tokens the target accepts and what each step costs. K is how many tokens the draft proposes per step; tau = 1 keeps the reply exactly the target's own; Compare runs the last prompt again in the other mode."""


class ChatLog(VerticalScroll):
    #: What an empty chat shows; the app adds its keys, as they are bound.
    welcome = reactive(WELCOME)

    def compose(self) -> ComposeResult:
        yield Static(self.welcome, classes="welcome")

    def watch_welcome(self, text: str) -> None:
        for welcome in self.query(".welcome").results(Static):
            welcome.update(text)

    def at_bottom(self) -> bool:
        return self.scroll_y >= self.max_scroll_y - 1

    def follow(self, was_at_bottom: bool) -> None:
        if was_at_bottom:
            self.call_after_refresh(self.scroll_end, animate=False)

    def add(self, widget: Widget) -> Widget:
        was_at_bottom = self.at_bottom()
        for welcome in self.query(".welcome"):
            welcome.remove()
        self.mount(widget)
        self.follow(was_at_bottom)
        return widget

    def add_message(self, role: str, content: str = "", metrics: dict[str, Any] | None = None,
                    streaming: bool = False) -> MessageView:
        view = MessageView(role, content, metrics, streaming)
        view.show_origins = getattr(self.screen, "show_origins", False)
        self.add(view)
        return view

    def clear(self) -> None:
        self.remove_children()
        self.mount(Static(self.welcome, classes="welcome"))

    @property
    def replies(self) -> list[MessageView]:
        return [view for view in self.query(MessageView) if view.role == "assistant"]
