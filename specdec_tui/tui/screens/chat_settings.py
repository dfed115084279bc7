"""This chat's own settings: system prompt, mode, K, tau, temperature, top-p and reply length.

Saved with the chat and restored when it is reopened. A bad value is named in one line and the
screen stays open with everything typed kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, TextArea

from specdec_tui.chat.options import DECODING_FIELDS, ChatOptions
from specdec_tui.config import DecodingSettings

LABELS = {"k": "K (most tokens drafted per step)", "tau": "tau (1 = lossless)", "temperature": "temperature (0 = greedy)",
          "top_p": "top-p", "max_new_tokens": "max new tokens"}


class ChatSettingsScreen(ModalScreen[ChatOptions | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save", priority=True)]

    def __init__(self, options: ChatOptions, modes: Sequence[str], base: DecodingSettings) -> None:
        super().__init__()
        self.options, self.modes, self.base = options, list(modes), base

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="chat-settings"):
            yield Label("This chat's settings", id="chat-settings-title")
            yield Label("System prompt", classes="field-label")
            yield TextArea(self.options.system_prompt, id="system_prompt", soft_wrap=True, compact=True)
            yield Label("Mode", classes="field-label")
            yield Select([(mode, mode) for mode in self.modes], value=self.options.mode, allow_blank=False, id="mode")
            for name in DECODING_FIELDS:
                yield Label(LABELS[name], classes="field-label")
                yield Input(str(getattr(self.options, name)), id=name, compact=True)
            yield Label("", id="chat-settings-error")
            with Horizontal(id="chat-settings-buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="save")
                yield Button("Cancel (Esc)", id="cancel")

    def values(self) -> dict[str, str]:
        return {"system_prompt": self.query_one("#system_prompt", TextArea).text,
                "mode": str(self.query_one("#mode", Select).value),
                **{name: self.query_one(f"#{name}", Input).value.strip() for name in DECODING_FIELDS}}

    def action_save(self) -> None:
        try:
            options = ChatOptions.checked(self.base, self.values())
        except ValueError as exc:
            self.query_one("#chat-settings-error", Label).update(f"Not saved: {exc}")
            return
        self.dismiss(options)

    @on(Button.Pressed, "#save")
    def _save_pressed(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_save()
