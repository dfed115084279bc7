"""The chat app: starts up, loads the models (or connects to a server), keeps themes and the
history, and shows the conversation's screen (``ChatScreen``), which owns everything after that."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from textual import work
from textual.app import App, SystemCommand
from textual.message import Message
from textual.screen import Screen

from specdec_tui.chat.history import History, HistoryError
from specdec_tui.config import Settings
from specdec_tui.models.errors import ModelError
from specdec_tui.models.progress import Progress, ProgressFn
from specdec_tui.runtime import ReplySource
from specdec_tui.tui.bindings import key_bindings
from specdec_tui.tui.keys import KEYS
from specdec_tui.tui.screens.chat import ChatScreen
from specdec_tui.tui.themes import DEFAULT_THEME, load_themes

SourceLoader = Callable[[Settings, ProgressFn], ReplySource]


def load_in_process(settings: Settings, progress: ProgressFn) -> ReplySource:
    from specdec_tui.runtime import load_runtime

    return load_runtime(settings, progress)


@dataclass
class LoadProgress(Message):
    progress: Progress


@dataclass
class Loaded(Message):
    source: ReplySource


@dataclass
class LoadFailed(Message):
    reason: str


class SpecDecApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "specdec-tui"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-normal"), (120, "-wide")]
    BINDINGS = key_bindings(app_level=True)

    def __init__(self, settings: Settings, load: SourceLoader = load_in_process,
                 history: History | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.load = load
        self.history = history
        self.source: ReplySource | None = None
        self.chat = ChatScreen()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {"draft-token": "#7EE787", "target-token": "#FFA657"}

    def get_default_screen(self) -> Screen:
        return self.chat  # it starts the loading once it is there to show it

    def on_mount(self) -> None:
        self.set_keymap(self.settings.keys)
        self._apply_themes()

    def _apply_themes(self) -> None:
        loaded = load_themes()
        for theme in loaded.themes:
            self.register_theme(theme)
        for problem in loaded.problems:
            self.notify(f"{problem}; skipped it", severity="warning", timeout=10)
        wanted = self.settings.chat.theme
        if wanted in self.available_themes:
            self.theme = wanted
        else:
            if wanted != DEFAULT_THEME:
                self.notify(f"theme {wanted!r} is not available; using {DEFAULT_THEME}", severity="warning")
            if DEFAULT_THEME in self.available_themes:
                self.theme = DEFAULT_THEME

    def open_history(self) -> History:
        """The chat history, opened on first use; one that cannot be opened is said once, and kept in memory."""
        if self.history is None:
            try:
                self.history = History(self.settings.chat.history_path)
            except HistoryError as exc:
                self.notify(f"{exc}; this session is not saved", severity="error", timeout=15)
                self.history = History(":memory:")
        return self.history

    @work(thread=True, exclusive=True, group="load")
    def load_models(self) -> None:
        last = 0.0

        def progress(event: Progress) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last > 0.1 or event.total is None or event.done == event.total:
                last = now
                self.post_message(LoadProgress(event))

        try:
            source = self.load(self.settings, progress)
        except ModelError as exc:
            self.post_message(LoadFailed(str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - any failure becomes a message in the app
            self.post_message(LoadFailed(f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(Loaded(source))

    def on_load_progress(self, message: LoadProgress) -> None:
        self.chat.show_progress(message.progress)

    def on_loaded(self, message: Loaded) -> None:
        source = self.source = message.source
        self.chat.models_ready(source)
        self.sub_title = f"{source.target_name} ← {source.draft_name or 'no draft'}{self.fault_warning()}"

    def fault_warning(self) -> str:
        faults = self.settings.faults
        return f" · FAULT INJECTION ON: {faults.describe()}" if faults.enabled else ""

    def on_load_failed(self, message: LoadFailed) -> None:
        self.chat.load_failed(message.reason)
        self.notify(message.reason, severity="error", timeout=30)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key in KEYS:
            if key.id != "quit":  # the palette lists Quit itself
                yield SystemCommand(key.description[:1].upper() + key.description[1:], self.chat.key_display(key.id),
                                    partial(self.run_action, key.action, self.chat))
