"""The conversation: the chat log, the prompt, the side panel, and the keys that act on them.

The screen owns the reply worker. The engine runs in a worker thread and posts its steps as
messages; the UI never waits for it and it never waits for the UI. Steps are coalesced so the
screen updates in batches.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from specdec_tui.chat.export import export_conversation
from specdec_tui.chat.history import History, HistoryError, StoredMessage
from specdec_tui.chat.options import ChatOptions
from specdec_tui.config import Settings
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, PromptTooLongError, StepEvent
from specdec_tui.engine.metrics import RunSummary, StepRecord, summarize
from specdec_tui.engine.modes import DRAFTER_MODES, MODES, TARGET
from specdec_tui.models.progress import Progress
from specdec_tui.runtime import Message as ChatMessage
from specdec_tui.runtime import ReplySource, decode_params, reply_summary
from specdec_tui.tui.bindings import key_bindings
from specdec_tui.tui.clipboard import copy_with_system_tool, save_copy
from specdec_tui.tui.keys import KEYS, WELCOME_KEYS, effective_keys
from specdec_tui.tui.screens.chat_settings import ChatSettingsScreen
from specdec_tui.tui.screens.copy_pick import CopyScreen
from specdec_tui.tui.screens.dialogs import AskText, Confirm
from specdec_tui.tui.screens.help import HelpScreen
from specdec_tui.tui.screens.report import ReportScreen
from specdec_tui.tui.screens.search import SearchScreen
from specdec_tui.tui.widgets.chat_log import WELCOME, ChatLog
from specdec_tui.tui.widgets.compare_view import CompareRun, CompareView
from specdec_tui.tui.widgets.conversation_list import ConversationList
from specdec_tui.tui.widgets.loading_panel import LoadingPanel
from specdec_tui.tui.widgets.message_view import MessageView
from specdec_tui.tui.widgets.prompt_input import PromptInput
from specdec_tui.tui.widgets.stats_panel import Knobs, StatsPanel

if TYPE_CHECKING:
    from specdec_tui.tui.app import SpecDecApp

#: The worker posts at most this often; tokens in between arrive together.
BATCH_SECONDS = 0.05
#: A reply being written is saved to the history at least this often, so a crash keeps most of it.
FLUSH_SECONDS = 0.5
TAU_STEP = 0.1


def degraded_banner(summary: RunSummary) -> str | None:
    """What the banner says about a reply that a failing model changed, or None."""
    why = f" ({summary.failure})" if summary.failure else ""
    if summary.degraded_tokens:
        return (f"DEGRADED: the target model is unavailable{why}. {summary.degraded_tokens} tokens were written by "
                "the draft model alone and are not verified (shown underlined).")
    if summary.finish_reason == "failed":
        return f"TARGET UNAVAILABLE{why}: no draft model is loaded, so the reply stopped; what it wrote is kept."
    if summary.draft_failures:
        return f"Draft model failing{why}: steps are the target's alone (the text is still exact, only slower)."
    return None


# ------------------------------------------------------------------ messages from the reply worker


@dataclass
class ReplyBatch(Message):
    view: MessageView
    steps: list[StepEvent]
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


class ChatScreen(Screen[None]):
    BINDINGS = key_bindings()

    def __init__(self) -> None:
        super().__init__()
        #: This chat's decoding settings (the settings' defaults until the chat changes them).
        self.options = ChatOptions("", TARGET, 1, 1.0, 0.0, 1.0, 1)
        #: The drafting mode the mode key switches back to from target-only.
        self.drafter = ""
        self.show_origins = False
        self.conversation_id: int | None = None
        self.messages: list[dict[str, str]] = []
        #: The history row of each of ``messages`` (None where it could not be saved).
        self.rows: list[int | None] = []
        #: While the last user message is being edited: its index in ``messages``.
        self.editing: int | None = None
        self.cancel_event: threading.Event | None = None
        self.busy = False
        self.last_run: tuple[Run, FinishedEvent] | None = None
        self.memory_note_shown: str | None = None
        self.records: list[StepRecord] = []
        #: The steps of the reply being written, and of the last finished one (for its report).
        self.steps: list[StepEvent] = []
        self.last_steps: list[StepEvent] = []
        #: A message typed while the models load, sent when they are ready.
        self.queued: str | None = None
        self.queued_view: MessageView | None = None
        self.load_error: str | None = None
        #: The history row of the reply being written, and when it was last saved.
        self.reply_row: int | None = None
        self.flushed_at = 0.0
        self.history_failed = False

    @property
    def specdec(self) -> SpecDecApp:
        return self.app  # type: ignore[return-value]

    @property
    def settings(self) -> Settings:
        return self.specdec.settings

    @property
    def source(self) -> ReplySource | None:
        return self.specdec.source

    @property
    def history(self) -> History:
        return self.specdec.open_history()

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="body"):
            yield ConversationList(id="chats")
            with Vertical(id="main"):
                yield LoadingPanel(id="loading")
                yield Static(id="degraded", markup=False)
                yield ChatLog(id="log")
                yield PromptInput(id="prompt")
            yield StatsPanel(id="panel")
        yield Footer(compact=True)

    @property
    def k(self) -> int:
        return self.options.k

    @property
    def tau(self) -> float:
        return self.options.tau

    @property
    def speculative(self) -> bool:
        return self.options.mode != TARGET

    def set_options(self, options: ChatOptions, save: bool = True) -> None:
        """Use ``options`` for the next replies, and keep them with the chat."""
        self.options = options
        if options.mode != TARGET:
            self.drafter = options.mode
        self._show_knobs()
        if save and self.conversation_id is not None:
            try:
                self.history.set_chat_settings(self.conversation_id, options.as_dict())
            except HistoryError as exc:
                self.notify(str(exc), severity="error", timeout=10)

    def can_run(self, mode: str) -> bool:
        """Whether the loaded models can run ``mode`` (every mode can while they load)."""
        return self.source is None or self.source.draft_name is not None or not MODES[mode].needs_draft_model

    def default_options(self) -> ChatOptions:
        options = ChatOptions.defaults(self.settings)
        return options if self.can_run(options.mode) else replace(options, mode=TARGET)

    def on_mount(self) -> None:
        self.drafter = self.settings.decoding.drafter
        self.options = ChatOptions.defaults(self.settings)
        self.query_one(ChatLog).welcome = self.welcome_text()
        self.refresh_chats()
        self._show_knobs()
        self.query_one(PromptInput).focus()
        self.specdec.load_models()

    def key_display(self, binding_id: str) -> str:
        """How the key bound to ``binding_id`` now (``[keys]`` applied) is shown, e.g. ``f7``."""
        keys = effective_keys(self.settings.keys)[binding_id].split(",")
        return " / ".join(self.app.get_key_display(Binding(key.strip(), "")) for key in keys)

    def welcome_text(self) -> str:
        labels = {k.id: k.label for k in KEYS}
        introduced = " · ".join(f"{self.key_display(i)} {labels[i]}" for i in WELCOME_KEYS)
        return f"{WELCOME}\n\n{introduced}"

    def refresh_chats(self) -> None:
        self.query_one(ConversationList).show(self.history.conversations(), self.conversation_id)

    def _knobs(self) -> Knobs:
        source = self.source
        return Knobs(
            mode=self.mode if self.speculative else "target-only",
            k=self.k,
            tau=self.tau,
            temperature=self.options.temperature,
            target=source.target_name if source else self.settings.models.target,
            draft=(source.draft_name or "none") if source else self.settings.models.draft,
        )

    def _show_knobs(self) -> None:
        self.query_one(StatsPanel).show_knobs(self._knobs())

    @property
    def mode(self) -> str:
        """The engine mode the next reply uses."""
        return self.options.mode

    def params(self) -> DecodeParams:
        o = self.options
        return decode_params(self.settings.decoding, k=o.k, tau=o.tau, temperature=o.temperature, top_p=o.top_p,
                             max_new_tokens=o.max_new_tokens)

    # ------------------------------------------------------------------ loading (the app posts, the screen shows)

    def show_progress(self, progress: Progress) -> None:
        self.query_one(LoadingPanel).show(progress)

    def models_ready(self, source: ReplySource) -> None:
        if not self.can_run(self.mode):
            self.set_options(replace(self.options, mode=TARGET), save=False)
        self.query_one(LoadingPanel).display = False
        self._show_knobs()
        if self.queued is not None:
            text, self.queued, self.queued_view = self.queued, None, None
            self._reply_to(text)

    def load_failed(self, reason: str) -> None:
        self.load_error = reason
        if self.queued is not None:  # give it back, so nothing typed is lost
            self.query_one(PromptInput).load_text(self.queued)
            if self.queued_view is not None:
                self.queued_view.remove()
            self.queued = self.queued_view = None
        self.query_one(LoadingPanel).fail(reason)

    # ------------------------------------------------------------------ chatting

    @on(PromptInput.Submitted)
    def send(self, event: PromptInput.Submitted) -> None:
        prompt = self.query_one(PromptInput)
        loading = self.source is None and self.load_error is None
        if loading and self.queued is None:
            self.queued = event.text
            self.queued_view = self.query_one(ChatLog).add_message("user", event.text)
            self.notify("Queued: it is sent as soon as the models are loaded")
            return
        if self.source is None or self.busy:
            why = ("a reply is still being written (Esc cancels it)" if self.busy
                   else "a message is already waiting for the models" if loading
                   else "the models failed to load")
            self.notify(f"Not sent: {why}", severity="warning")
            prompt.load_text(event.text)
            return
        if self.editing is not None:
            self._drop_from(self.editing)
            self.editing = None
        self.query_one(ChatLog).add_message("user", event.text)
        self._reply_to(event.text)

    def _reply_to(self, text: str) -> None:
        """Store the user's message (already on screen) and start the reply to it."""
        self._store("user", text)
        self._reply()

    def _store(self, role: str, content: str, metrics: dict[str, Any] | None = None) -> None:
        """Keep the message for the conversation and write it to the history (one transaction)."""
        self.messages.append({"role": role, "content": content})
        self.rows.append(self._save(role, content, metrics))
        self.refresh_chats()

    def _save(self, role: str, content: str, metrics: dict[str, Any] | None) -> int | None:
        """Write a message to the history and return its row; the reply being written updates its own."""
        row = None
        try:
            if self.conversation_id is None:
                self.conversation_id = self.history.create_conversation(content.splitlines()[0][:60])
                self.history.set_chat_settings(self.conversation_id, self.options.as_dict())
            if role == "assistant" and self.reply_row is not None:
                row = self.reply_row
                self.history.update_message(row, content, metrics)
            else:
                row = self.history.add_message(self.conversation_id, role, content, metrics)
                self.reply_row = row if role == "assistant" and metrics and metrics.get("partial") else None
        except HistoryError as exc:
            if not self.history_failed:  # once per reply: the chat goes on, unsaved
                self.notify(str(exc), severity="error", timeout=10)
            self.history_failed = True
        else:
            self.history_failed = False
        return row

    def _drop_from(self, index: int) -> None:
        """Forget ``messages[index:]``: from the screen (with what follows them), the chat and the history."""
        log = self.query_one(ChatLog)
        views = [v for v in log.query(MessageView) if v.role in ("user", "assistant")]
        if index < len(views):
            children = list(log.children)
            for widget in children[children.index(views[index]):]:
                widget.remove()
        for row in self.rows[index:]:
            if row is not None:
                try:
                    self.history.delete_message(row)
                except HistoryError as exc:
                    self.notify(str(exc), severity="error", timeout=10)
        del self.messages[index:], self.rows[index:]
        self.last_run = None
        self.refresh_chats()

    def _flush_partial(self, view: MessageView) -> None:
        """Save the reply as written so far (at most every ``FLUSH_SECONDS``)."""
        now = time.monotonic()
        if view.content and now - self.flushed_at >= FLUSH_SECONDS:
            self.flushed_at = now
            self._save("assistant", view.content, {"partial": True})

    def show_degraded(self, summary: RunSummary) -> None:
        banner = self.query_one("#degraded", Static)
        message = degraded_banner(summary)
        banner.set_class(message is not None, "-shown")
        banner.update(message or "")

    def _reply(self, new_sample: bool = False) -> None:
        """Start a reply to the conversation as it stands (it ends with the user's message).

        ``new_sample``: when sampling, a fresh seed, so a reply written again is not the same one.
        """
        chat = [{"role": "system", "content": self.options.system_prompt}, *self.messages]
        params = self.params()
        if new_sample and params.temperature > 0:
            params = replace(params, seed=None)
        view = self.query_one(ChatLog).add_message("assistant", streaming=True)
        self._start_reply(view, Run(tuple(chat), params, self.mode))

    def _start_reply(self, view: MessageView, run: Run) -> None:
        self.busy = True
        self.records, self.steps = [], []
        self.reply_row, self.flushed_at = None, time.monotonic()
        self.cancel_event = threading.Event()
        self._show_knobs()
        self._generate(view, run, self.cancel_event)

    @work(thread=True, group="generate")
    def _generate(self, view: MessageView, run: Run, cancel: threading.Event) -> None:
        assert self.source is not None
        steps: list[StepEvent] = []
        #: Seconds to the first token, the prompt read included, as the engine's final figure counts them.
        ttft = 0.0
        try:
            conversation = str(self.conversation_id) if self.conversation_id is not None else None
            events = self.source.reply(run.messages, run.params, run.mode, cancel, conversation_id=conversation)
            start = last_post = time.perf_counter()  # decoding starts with the first event asked for
            for event in events:
                if isinstance(event, StepEvent):
                    steps.append(event)
                    now = time.perf_counter()
                    ttft = ttft or now - start
                    if now - last_post >= BATCH_SECONDS:
                        self.post_message(ReplyBatch(view, steps, now - start, ttft))
                        steps, last_post = [], now
                else:
                    if steps:
                        self.post_message(ReplyBatch(view, steps, time.perf_counter() - start, ttft))
                    self.post_message(ReplyDone(view, event, run))
        except PromptTooLongError as exc:
            self.post_message(ReplyFailed(view, str(exc)))
        except Exception as exc:  # noqa: BLE001 - a failed reply is a message in the chat
            self.post_message(ReplyFailed(view, f"generation failed: {type(exc).__name__}: {exc}"))

    def on_reply_batch(self, message: ReplyBatch) -> None:
        log = self.query_one(ChatLog)
        was_at_bottom = log.at_bottom()
        message.view.append([token for step in message.steps for token in step.tokens])
        log.follow(was_at_bottom)
        self.steps.extend(message.steps)
        self.records.extend(step.record for step in message.steps)
        live = summarize(self.records, mode=self.mode, prompt_tokens=0, seconds=message.elapsed, ttft_s=message.ttft,
                         finish_reason="running")
        self.query_one(StatsPanel).show_run(live, self.records)
        if live.degraded_tokens:
            self.show_degraded(live)
        self._flush_partial(message.view)

    def on_reply_done(self, message: ReplyDone) -> None:
        finished = message.finished
        metrics = reply_summary(finished.summary, message.run.params)
        message.view.finish(finished.text, metrics)
        self.query_one(StatsPanel).show_run(finished.summary, self.records)
        self._store("assistant", finished.text, metrics)
        self.show_degraded(finished.summary)
        if finished.summary.finish_reason == "failed":
            self.query_one(ChatLog).add_message("error", f"The reply stopped: {finished.summary.failure}. "
                                                "No draft model is loaded to write on; what was written is kept.")
        self.last_run = (message.run, finished)
        self.last_steps = self.steps
        self._reply_ended()
        if finished.summary.finish_reason == "cancelled":
            self.notify("Reply cancelled; the partial reply is kept")
        self._notify_memory()

    def _notify_memory(self) -> None:
        """Say once what the memory budget did before the reply (it makes long passes slower)."""
        note = self.source.memory_note if self.source is not None else None
        if note is not None and note != self.memory_note_shown:
            self.memory_note_shown = note
            self.notify(note, timeout=20)

    def on_reply_failed(self, message: ReplyFailed) -> None:
        view = message.view
        if view is not None and view.content:  # keep what was written, on screen and in the history
            view.finish(view.content, {"partial": True})
            self._store("assistant", view.content, {"partial": True})
        elif view is not None:
            view.remove()
        self.query_one(ChatLog).add_message("error", message.reason)
        self._reply_ended()

    def _reply_ended(self) -> None:
        self.reply_row = None
        self.busy = False
        self.cancel_event = None

    # ------------------------------------------------------------------ actions

    def action_cancel(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()

    def action_k(self, delta: int) -> None:
        self.set_options(replace(self.options, k=max(1, min(32, self.k + delta))))

    def action_tau(self, delta: int) -> None:
        self.set_options(replace(self.options, tau=round(max(TAU_STEP, min(1.0, self.tau + delta * TAU_STEP)), 2)))

    def action_toggle_mode(self) -> None:
        if self.source is not None and self.source.draft_name is None:
            self.notify("No draft model is loaded: target-only it is", severity="warning")
            return
        self.set_options(replace(self.options, mode=TARGET if self.speculative else self.drafter))

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

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen([(self.key_display(k.id), k.description) for k in KEYS]))

    def action_new_chat(self) -> None:
        if self.busy:
            self.notify("Cancel the reply (Esc) before starting a new chat", severity="warning")
            return
        self._show_conversation(None, self.default_options(), [])

    def action_copy_reply(self) -> None:
        replies = [m for m in self.messages if m["role"] == "assistant"]
        if not replies:
            self.notify("No reply to copy yet", severity="warning")
            return
        self.copy(replies[-1]["content"], "the last reply")

    def copy(self, text: str, what: str) -> None:
        self.app.copy_to_clipboard(text)  # OSC 52: most terminals put it on the clipboard
        tool = copy_with_system_tool(text)
        if tool:
            self.notify(f"Copied {what} ({len(text)} characters, via {tool})")
        else:
            self.notify(f"Copied {what} through the terminal (OSC 52); also saved to {save_copy(text)}")

    def action_copy_pick(self) -> None:
        if not self.messages:
            self.notify("Nothing to copy yet", severity="warning")
            return

        def chosen(text: str | None) -> None:
            if text is not None:
                self.copy(text, f"{len(text.splitlines()) or 1} lines")

        self.app.push_screen(CopyScreen(self.messages), chosen)

    def action_regenerate(self) -> None:
        if self.busy or self.source is None:
            self.notify("Wait for the models and the reply in progress (Esc cancels it)", severity="warning")
            return
        if not self.messages or self.messages[-1]["role"] != "assistant":
            self.notify("No reply to write again yet", severity="warning")
            return
        self._drop_from(len(self.messages) - 1)
        if self.options.temperature == 0:
            self.notify("Greedy decoding writes the same text again; raise the temperature (chat settings) "
                        "for a different reply")
        else:
            self.notify("Writing a new sample of the last reply")
        self._reply(new_sample=True)

    def action_edit_last(self) -> None:
        prompt = self.query_one(PromptInput)
        if self.editing is not None:
            self.editing = None
            self.notify("Stopped editing: Enter now sends a new message")
            return
        if self.busy:
            self.notify("Wait for the reply to finish (Esc cancels it) before editing", severity="warning")
            return
        users = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
        if not users:
            self.notify("No message of yours to edit yet", severity="warning")
            return
        self.editing = users[-1]
        prompt.load_text(self.messages[users[-1]]["content"])
        prompt.move_cursor(prompt.document.end)
        prompt.focus()
        self.notify(f"Editing your last message: Enter sends it in place of the last exchange; "
                    f"{self.key_display('edit')} again stops editing")

    def action_chat_settings(self) -> None:
        if self.busy:
            self.notify("Wait for the reply to finish (Esc cancels it)", severity="warning")
            return
        modes = self.source_modes()

        def chosen(options: ChatOptions | None) -> None:
            if options is not None:
                self.set_options(options)
                self.notify("Saved: the next replies of this chat use these settings")

        self.app.push_screen(ChatSettingsScreen(self.options, modes, self.settings.decoding), chosen)

    def source_modes(self) -> list[str]:
        """The modes the loaded models can run (all of them while loading)."""
        return [TARGET, *(mode for mode in DRAFTER_MODES if self.can_run(mode))]

    def chosen_chat(self) -> int | None:
        """The chat the chats list has highlighted, when it is shown; else the open one."""
        chats = self.query_one(ConversationList)
        shown = chats.display and (chats.has_class("-shown") or self.app.has_class("-wide") or chats.has_focus)
        return (chats.chosen if shown else None) or self.conversation_id

    def action_rename_chat(self) -> None:
        chat = self.chosen_chat()
        if chat is None:
            self.notify("No chat to rename yet", severity="warning")
            return
        title = next((c.title for c in self.history.conversations() if c.id == chat), "")

        def renamed(new: str | None) -> None:
            if new is None:
                return
            try:
                self.history.rename(chat, new)
            except HistoryError as exc:
                self.notify(str(exc), severity="error", timeout=10)
            self.refresh_chats()

        self.app.push_screen(AskText("New title for this chat", title), renamed)

    def action_delete_chat(self) -> None:
        chat = self.chosen_chat()
        info = next((c for c in self.history.conversations() if c.id == chat), None)
        if info is None:
            self.notify("No chat to delete", severity="warning")
            return
        if self.busy and chat == self.conversation_id:
            self.notify("Cancel the reply (Esc) before deleting this chat", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.history.delete(info.id)
            except HistoryError as exc:
                self.notify(str(exc), severity="error", timeout=10)
                return
            if info.id == self.conversation_id:
                self.action_new_chat()
            self.refresh_chats()
            self.notify(f"Deleted {info.title!r}")

        self.app.push_screen(Confirm(f"Delete the chat {info.title!r} and its {info.messages} messages? "
                                     "This cannot be undone.", yes="Delete"), answered)

    def action_search(self) -> None:
        def chosen(conversation_id: int | None) -> None:
            if conversation_id is not None:
                self.open_chat(conversation_id)

        self.app.push_screen(SearchScreen(self.history), chosen)

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
        other = replace(run, mode=TARGET if run.mode != TARGET else self.drafter)
        self.busy = True
        self.notify(f"Comparing: running the last prompt again as {self._label(other.mode)}…")
        pieces = tuple(t.text for step in self.last_steps for t in step.tokens)
        self._compare(run, finished, pieces, other)

    def action_export(self) -> None:
        if self.conversation_id is None:
            self.notify("Nothing to export yet: send a message first", severity="warning")
            return
        title = next((c.title for c in self.history.conversations() if c.id == self.conversation_id), "chat")
        folder = Path(platformdirs.user_data_dir("specdec-tui")) / "exports"
        try:
            markdown, data = export_conversation(folder, self.conversation_id, title,
                                                 self.history.messages(self.conversation_id))
        except OSError as exc:
            self.notify(f"Export failed: {exc.strerror or exc} ({folder})", severity="error", timeout=10)
            return
        self.notify(f"Exported to {markdown} and {data.name}", timeout=10)

    def action_report(self) -> None:
        if self.last_run is None or self.busy:
            why = "wait for the reply to finish" if self.busy else "send a message first"
            self.notify(f"No report yet: {why}", severity="warning")
            return
        run, finished = self.last_run
        summary = finished.summary
        rate = "–" if summary.acceptance_rate is None else f"{summary.acceptance_rate:.0%}"
        title = (f"Speculation report · {summary.mode} k={run.params.k} tau={run.params.tau:g} · "
                 f"{summary.new_tokens} tokens · {summary.tokens_per_s:.1f} tok/s · acceptance {rate}")
        colours = self.app.theme_variables
        self.app.push_screen(ReportScreen(title, summary, self.last_steps, colours.get("draft-token", "green"),
                                          colours.get("target-token", "yellow"),
                                          f"italic underline {colours.get('error', 'red')}"))

    @staticmethod
    def _label(mode: str) -> str:
        return "target-only" if mode == TARGET else f"speculative ({mode})"

    @work(thread=True, group="generate")
    def _compare(self, run: Run, finished: FinishedEvent, pieces: tuple[str, ...], other: Run) -> None:
        assert self.source is not None
        try:
            # The compare run starts from empty caches, as a first reply does.
            events = list(self.source.reply(other.messages, other.params, other.mode, fresh=True))
            again = events[-1]
        except Exception as exc:  # noqa: BLE001
            self.post_message(ReplyFailed(None, f"compare failed: {type(exc).__name__}: {exc}"))
            return
        assert isinstance(again, FinishedEvent)
        self.post_message(CompareDone(
            CompareRun(self._label(run.mode), finished.summary, finished.token_ids, finished.text, pieces),
            CompareRun(self._label(other.mode), again.summary, again.token_ids, again.text,
                       tuple(t.text for e in events if isinstance(e, StepEvent) for t in e.tokens)),
        ))

    def on_compare_done(self, message: CompareDone) -> None:
        self.busy = False
        view = self.query_one(ChatLog).add(CompareView(message.first, message.second))
        self.call_after_refresh(view.scroll_visible, animate=False)

    @on(ConversationList.Opened)
    def open_conversation(self, event: ConversationList.Opened) -> None:
        self.open_chat(event.conversation_id)

    def open_chat(self, conversation_id: int) -> None:
        if self.busy:
            self.notify("Cancel the reply (Esc) before switching chats", severity="warning")
            return
        options = ChatOptions.restored(self.history.chat_settings(conversation_id), self.default_options(),
                                       self.settings.decoding)
        self._show_conversation(conversation_id, options, self.history.messages(conversation_id))

    def _show_conversation(self, conversation_id: int | None, options: ChatOptions,
                           stored: list[StoredMessage]) -> None:
        """Make ``conversation_id`` (None: a new chat) the open one, with its settings and messages."""
        self.conversation_id = conversation_id
        self.messages = [{"role": m.role, "content": m.content} for m in stored]
        self.rows = [m.id for m in stored]
        self.editing, self.last_run = None, None
        self.set_options(options, save=False)
        log = self.query_one(ChatLog)
        log.clear()
        for message in stored:
            log.add_message(message.role, message.content, message.metrics)
        self.refresh_chats()
        self.query_one(PromptInput).focus()

    def on_unmount(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()

