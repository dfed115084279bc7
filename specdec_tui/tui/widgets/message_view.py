"""One chat message. A reply streams in coloured by token origin, then renders as Markdown."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Label, Markdown, Static

from specdec_tui.engine.decoder import Origin, Token

ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System", "error": "Error"}


def describe_metrics(metrics: dict[str, Any]) -> str:
    """The one-line footer under a finished reply."""
    if metrics.get("partial"):
        return "partial reply: the chat stopped while it was being written"
    parts = [f"{metrics['tokens_per_s']:.1f} tok/s", f"{metrics['new_tokens']} tokens"]
    if metrics.get("acceptance_rate") is not None:
        parts.append(f"acceptance {metrics['acceptance_rate']:.0%}")
    mode = metrics.get("mode", "")
    parts.append(mode if mode == "target" else f"{mode} k={metrics.get('k')} tau={metrics.get('tau')}")
    if metrics.get("degraded_tokens"):
        parts.append(f"{metrics['degraded_tokens']} tokens unverified (draft model alone)")
    if metrics.get("finish_reason") not in (None, "eos"):
        parts.append(str(metrics["finish_reason"]))
    return " · ".join(parts)


class MessageView(Vertical):
    COMPONENT_CLASSES = {"message--draft", "message--target", "message--degraded"}

    #: Show a reply as origin-coloured text instead of Markdown.
    show_origins: reactive[bool] = reactive(False)

    def __init__(self, role: str, content: str = "", metrics: dict[str, Any] | None = None,
                 streaming: bool = False) -> None:
        super().__init__(classes=f"message -{role}")
        self.role = role
        self.content = content
        self.metrics = metrics
        self.streaming = streaming
        self.spans: list[tuple[str, Origin]] = []

    def compose(self) -> ComposeResult:
        yield Label(ROLE_TITLES.get(self.role, self.role), classes="message--role")
        if self.role in ("user", "error"):
            yield Static(self.content, classes="message--plain", markup=False)
            return
        yield Static(classes="message--stream")
        yield Markdown(self.content, classes="message--markdown")
        yield Label(describe_metrics(self.metrics) if self.metrics else "", classes="message--meta")

    def on_mount(self) -> None:
        if self.role == "assistant":
            self._update_display()

    @property
    def degraded(self) -> bool:
        """Whether some of this reply was written by the draft model alone (those tokens stay coloured)."""
        return any(origin is Origin.DEGRADED for _, origin in self.spans)

    def _stream_text(self) -> Text:
        if not self.show_origins and not self.streaming and not self.degraded:
            return Text(self.content)
        text = Text()
        styles = {origin: self.get_component_rich_style(f"message--{origin.value}") for origin in Origin}
        for piece, origin in self.spans:
            shown = self.show_origins or origin is Origin.DEGRADED
            text.append(piece, style=styles[origin] if shown else "")
        return text

    def _update_display(self) -> None:
        stream = self.query_one(".message--stream", Static)
        markdown = self.query_one(".message--markdown", Markdown)
        as_markdown = not self.streaming and not ((self.show_origins or self.degraded) and self.spans)
        stream.display = not as_markdown
        markdown.display = as_markdown
        if not as_markdown:
            stream.update(self._stream_text())

    def watch_show_origins(self) -> None:
        if self.role == "assistant" and self.is_mounted:
            self._update_display()

    def append(self, tokens: Iterable[Token]) -> None:
        self.spans.extend((t.text, t.origin) for t in tokens if t.text)
        self.content = "".join(piece for piece, _ in self.spans)
        self._update_display()

    def finish(self, text: str, metrics: dict[str, Any] | None) -> None:
        self.streaming = False
        self.content = text
        self.metrics = metrics
        self.query_one(".message--markdown", Markdown).update(text)
        self.query_one(".message--meta", Label).update(describe_metrics(metrics) if metrics else "")
        self._update_display()
