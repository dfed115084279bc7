"""The chat app: conversation on the left, what the draft is doing on the right.

The engine runs in a worker thread and posts its steps as messages; the UI never waits for it and
it never waits for the UI. Steps are coalesced so the screen updates in batches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header

from specdec_tui.chat.history import History, HistoryError
from specdec_tui.config import Settings
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, PromptTooLongError, StepEvent, Token
from specdec_tui.engine.metrics import StepRecord, summarize
from specdec_tui.engine.modes import TARGET
from specdec_tui.models.errors import ModelError
from specdec_tui.models.progress import Progress, ProgressFn
from specdec_tui.runtime import Message as ChatMessage
from specdec_tui.runtime import ReplySource, decode_params, reply_summary
from specdec_tui.tui.clipboard import copy_with_system_tool, save_copy
from specdec_tui.tui.keys import KEYS, WELCOME_KEYS, effective_keys
from specdec_tui.tui.screens.help import HelpScreen
from specdec_tui.tui.themes import DEFAULT_THEME, load_themes
from specdec_tui.tui.widgets.chat_log import WELCOME, ChatLog
from specdec_tui.tui.widgets.compare_view import CompareRun, CompareView
from specdec_tui.tui.widgets.conversation_list import ConversationList
from specdec_tui.tui.widgets.loading_panel import LoadingPanel
from specdec_tui.tui.widgets.message_view import MessageView
from specdec_tui.tui.widgets.prompt_input import PromptInput
from specdec_tui.tui.widgets.stats_panel import Knobs, StatsPanel

SourceLoader = Callable[[Settings, ProgressFn], ReplySource]
#: The worker posts at most this often; tokens in between arrive together.
BATCH_SECONDS = 0.05
TAU_STEP = 0.1


def key_bindings() -> list[Binding]:
    """The chat's bindings, made from the one table of keys."""
    groups = {k.group: Binding.Group(k.group, compact=True) for k in KEYS if k.group}
    return [Binding(k.key, k.action, k.label, priority=True, tooltip=k.description, id=k.id,
                    group=groups.get(k.group) if k.group else None) for k in KEYS]


def load_in_process(settings: Settings, progress: ProgressFn) -> ReplySource:
    from specdec_tui.runtime import load_runtime

    return load_runtime(settings, progress)


# ------------------------------------------------------------------ messages from workers


@dataclass
class LoadProgress(Message):
    progress: Progress


@dataclass
class Loaded(Message):
    source: ReplySource


@dataclass
class LoadFailed(Message):
    reason: str


@dataclass
class ReplyBatch(Message):
    view: MessageView
    tokens: list[Token]
    records: list[StepRecord]
    elapsed: float
    ttft: float


@dataclass
class ReplyDone(Message):
    view: MessageView
    finished: FinishedEvent
    run: Run


@dataclass
class ReplyFailed(Message):
    view: MessageView | None
    reason: str


@dataclass
class CompareDone(Message):
    first: CompareRun
    second: CompareRun


@dataclass(frozen=True)
class Run:
    """What produced a reply, so compare can run it again in the other mode."""

    messages: tuple[ChatMessage, ...]
    params: DecodeParams
    mode: str


class SpecDecApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "specdec-tui"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-normal"), (120, "-wide")]
    BINDINGS = key_bindings()

    def __init__(self, settings: Settings, load: SourceLoader = load_in_process,
                 history: History | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.load = load
        self.history = history
        self.source: ReplySource | None = None
        decoding = settings.decoding
        self.k, self.tau = decoding.k, decoding.tau
        self.speculative = True
        self.show_origins = False
        self.conversation_id: int | None = None
        self.messages: list[dict[str, str]] = []
        self.cancel_event: threading.Event | None = None
        self.busy = False
        self.last_run: tuple[Run, FinishedEvent] | None = None
        self.records: list[StepRecord] = []

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="body"):
            yield ConversationList(id="chats")
            with Vertical(id="main"):
                yield LoadingPanel(id="loading")
                yield ChatLog(id="log")
                yield PromptInput(id="prompt")
            yield StatsPanel(id="panel")
        yield Footer(compact=True)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {"draft-token": "#7EE787", "target-token": "#FFA657"}

    def on_mount(self) -> None:
        self.set_keymap(self.settings.keys)
        self.query_one(ChatLog).welcome = self.welcome_text()
        self._apply_themes()
        self._open_history()
        self._show_knobs()
        self.query_one(PromptInput).focus()
        self._load_models()

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

    def _open_history(self) -> None:
        if self.history is None:
            try:
                self.history = History(self.settings.chat.history_path)
            except HistoryError as exc:
                self.notify(f"{exc}; this session is not saved", severity="error", timeout=15)
                self.history = History(":memory:")
        self._refresh_chats()

    def _refresh_chats(self) -> None:
        assert self.history is not None
        self.query_one(ConversationList).show(self.history.conversations(), self.conversation_id)

    def _knobs(self) -> Knobs:
        source = self.source
        return Knobs(
            mode=self.mode if self.speculative else "target-only",
            k=self.k,
            tau=self.tau,
            temperature=self.settings.decoding.temperature,
            target=source.target_name if source else self.settings.models.target,
            draft=(source.draft_name or "none") if source else self.settings.models.draft,
        )

    def _show_knobs(self) -> None:
        self.query_one(StatsPanel).show_knobs(self._knobs())

    @property
    def mode(self) -> str:
        """The engine mode the next reply uses."""
        return self.settings.decoding.drafter if self.speculative else TARGET

    def params(self) -> DecodeParams:
        return decode_params(self.settings.decoding, k=self.k, tau=self.tau)

    # ------------------------------------------------------------------ loading

    @work(thread=True, exclusive=True, group="load")
    def _load_models(self) -> None:
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
        self.query_one(LoadingPanel).show(message.progress)

    def on_loaded(self, message: Loaded) -> None:
        source = self.source = message.source
        if source.draft_name is None:
            self.speculative = False
        self.query_one(LoadingPanel).display = False
        self._show_knobs()
        self.sub_title = f"{source.target_name} ← {source.draft_name or 'no draft'}"

    def on_load_failed(self, message: LoadFailed) -> None:
        self.query_one(LoadingPanel).fail(message.reason)
        self.notify(message.reason, severity="error", timeout=30)

    # ------------------------------------------------------------------ chatting

    @on(PromptInput.Submitted)
    def send(self, event: PromptInput.Submitted) -> None:
        prompt = self.query_one(PromptInput)
        if self.source is None or self.busy:
            why = "a reply is still being written (Esc cancels it)" if self.busy else "the models are not loaded yet"
            self.notify(f"Not sent: {why}", severity="warning")
            prompt.load_text(event.text)
            return
        log = self.query_one(ChatLog)
        self._store("user", event.text)
        log.add_message("user", event.text)
        chat = [{"role": "system", "content": self.settings.chat.system_prompt}, *self.messages]
        run = Run(tuple(chat), self.params(), self.mode)
        view = log.add_message("assistant", streaming=True)
        self._start_reply(view, run)

    def _store(self, role: str, content: str, metrics: dict[str, Any] | None = None) -> None:
        """Keep the message for the conversation and write it to the history (one transaction)."""
        self.messages.append({"role": role, "content": content})
        assert self.history is not None
        try:
            if self.conversation_id is None:
                self.conversation_id = self.history.create_conversation(content.splitlines()[0][:60])
            self.history.add_message(self.conversation_id, role, content, metrics)
        except HistoryError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        self._refresh_chats()

    def _start_reply(self, view: MessageView, run: Run) -> None:
        self.busy = True
        self.records = []
        self.cancel_event = threading.Event()
        self._show_knobs()
        self._generate(view, run, self.cancel_event)

    @work(thread=True, group="generate")
    def _generate(self, view: MessageView, run: Run, cancel: threading.Event) -> None:
        assert self.source is not None
        tokens: list[Token] = []
        records: list[StepRecord] = []
        #: Seconds to the first token, the prompt read included, as the engine's final figure counts them.
        ttft = 0.0
        try:
            conversation = str(self.conversation_id) if self.conversation_id is not None else None
            events = self.source.reply(run.messages, run.params, run.mode, cancel, conversation_id=conversation)
            start = last_post = time.perf_counter()  # decoding starts with the first event asked for
            for event in events:
                if isinstance(event, StepEvent):
                    tokens.extend(event.tokens)
                    records.append(event.record)
                    now = time.perf_counter()
                    ttft = ttft or now - start
                    if now - last_post >= BATCH_SECONDS:
                        self.post_message(ReplyBatch(view, tokens, records, now - start, ttft))
                        tokens, records, last_post = [], [], now
                else:
                    if tokens or records:
                        self.post_message(ReplyBatch(view, tokens, records, time.perf_counter() - start, ttft))
                    self.post_message(ReplyDone(view, event, run))
        except PromptTooLongError as exc:
            self.post_message(ReplyFailed(view, str(exc)))
        except Exception as exc:  # noqa: BLE001 - a failed reply is a message in the chat
            self.post_message(ReplyFailed(view, f"generation failed: {type(exc).__name__}: {exc}"))

    def on_reply_batch(self, message: ReplyBatch) -> None:
        log = self.query_one(ChatLog)
        was_at_bottom = log.at_bottom()
        message.view.append(message.tokens)
        log.follow(was_at_bottom)
        self.records.extend(message.records)
        live = summarize(self.records, mode=self.mode, prompt_tokens=0, seconds=message.elapsed, ttft_s=message.ttft,
                         finish_reason="running")
        self.query_one(StatsPanel).show_run(live, self.records)

    def on_reply_done(self, message: ReplyDone) -> None:
        finished = message.finished
        metrics = reply_summary(finished.summary, message.run.params)
        message.view.finish(finished.text, metrics)
        self.query_one(StatsPanel).show_run(finished.summary, self.records)
        self._store("assistant", finished.text, metrics)
        self.last_run = (message.run, finished)
        self.busy = False
        self.cancel_event = None
        if finished.summary.finish_reason == "cancelled":
            self.notify("Reply cancelled; the partial reply is kept")

    def on_reply_failed(self, message: ReplyFailed) -> None:
        if message.view is not None:
            message.view.remove()
        self.query_one(ChatLog).add_message("error", message.reason)
        self.busy = False
        self.cancel_event = None

    # ------------------------------------------------------------------ actions

    def action_cancel(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()

    def action_k(self, delta: int) -> None:
        self.k = max(1, min(32, self.k + delta))
        self._show_knobs()

    def action_tau(self, delta: int) -> None:
        self.tau = round(max(TAU_STEP, min(1.0, self.tau + delta * TAU_STEP)), 2)
        self._show_knobs()

    def action_toggle_mode(self) -> None:
        if self.source is not None and self.source.draft_name is None:
            self.notify("No draft model is loaded: target-only it is", severity="warning")
            return
        self.speculative = not self.speculative
        self._show_knobs()

    def action_toggle_origins(self) -> None:
        self.show_origins = not self.show_origins
        for view in self.query(MessageView):
            view.show_origins = self.show_origins

    def action_toggle_panel(self) -> None:
        self.query_one(StatsPanel).toggle_class("-hidden")

    def action_toggle_chats(self) -> None:
        chats = self.query_one(ConversationList)
        chats.toggle_class("-shown")
        if chats.has_class("-shown"):
            chats.focus()

    def key_display(self, binding_id: str) -> str:
        """How the key bound to ``binding_id`` now (``[keys]`` applied) is shown, e.g. ``F7``."""
        keys = effective_keys(self.settings.keys)[binding_id].split(",")
        return " / ".join(self.get_key_display(Binding(key.strip(), "")) for key in keys)

    def welcome_text(self) -> str:
        labels = {k.id: k.label for k in KEYS}
        introduced = " · ".join(f"{self.key_display(i)} {labels[i]}" for i in WELCOME_KEYS)
        return f"{WELCOME}\n\n{introduced}"

    def action_help(self) -> None:
        self.push_screen(HelpScreen([(self.key_display(k.id), k.description) for k in KEYS]))

    def action_new_chat(self) -> None:
        if self.busy:
            self.notify("Cancel the reply (Esc) before starting a new chat", severity="warning")
            return
        self.conversation_id = None
        self.messages = []
        self.last_run = None
        self.query_one(ChatLog).clear()
        self._refresh_chats()
        self.query_one(PromptInput).focus()

    def action_copy_reply(self) -> None:
        replies = [m for m in self.messages if m["role"] == "assistant"]
        if not replies:
            self.notify("No reply to copy yet", severity="warning")
            return
        text = replies[-1]["content"]
        self.copy_to_clipboard(text)  # OSC 52: most terminals put it on the clipboard
        tool = copy_with_system_tool(text)
        if tool:
            self.notify(f"Copied the last reply ({len(text)} characters, via {tool})")
        else:
            self.notify(f"Copied the last reply through the terminal (OSC 52); also saved to {save_copy(text)}")

    def action_compare(self) -> None:
        if self.last_run is None or self.source is None:
            self.notify("Nothing to compare yet: send a message first", severity="warning")
            return
        if self.busy:
            self.notify("Wait for the reply to finish (or Esc) before comparing", severity="warning")
            return
        if self.source.draft_name is None:
            self.notify("Compare needs a draft model", severity="warning")
            return
        run, finished = self.last_run
        other = replace(run, mode=TARGET if run.mode != TARGET else self.settings.decoding.drafter)
        self.busy = True
        self.notify(f"Comparing: running the last prompt again as {self._label(other.mode)}…")
        self._compare(run, finished, other)

    @staticmethod
    def _label(mode: str) -> str:
        return "target-only" if mode == TARGET else f"speculative ({mode})"

    @work(thread=True, group="generate")
    def _compare(self, run: Run, finished: FinishedEvent, other: Run) -> None:
        assert self.source is not None
        try:
            # The compare run starts from empty caches, as a first reply does.
            again = list(self.source.reply(other.messages, other.params, other.mode, fresh=True))[-1]
        except Exception as exc:  # noqa: BLE001
            self.post_message(ReplyFailed(None, f"compare failed: {type(exc).__name__}: {exc}"))
            return
        assert isinstance(again, FinishedEvent)
        self.post_message(CompareDone(
            CompareRun(self._label(run.mode), finished.summary, finished.token_ids, finished.text),
            CompareRun(self._label(other.mode), again.summary, again.token_ids, again.text),
        ))

    def on_compare_done(self, message: CompareDone) -> None:
        self.busy = False
        view = self.query_one(ChatLog).add(CompareView(message.first, message.second))
        self.call_after_refresh(view.scroll_visible, animate=False)

    @on(ConversationList.Opened)
    def open_conversation(self, event: ConversationList.Opened) -> None:
        if self.busy:
            self.notify("Cancel the reply (Esc) before switching chats", severity="warning")
            return
        assert self.history is not None
        self.conversation_id = event.conversation_id
        self.messages = []
        self.last_run = None
        log = self.query_one(ChatLog)
        log.clear()
        for stored in self.history.messages(event.conversation_id):
            self.messages.append({"role": stored.role, "content": stored.content})
            log.add_message(stored.role, stored.content, stored.metrics)
        self.query_one(PromptInput).focus()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key in KEYS:
            if key.id != "quit":  # the palette lists Quit itself
                yield SystemCommand(key.description[:1].upper() + key.description[1:], self.key_display(key.id),
                                    partial(self.run_action, key.action))

    def on_unmount(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()

