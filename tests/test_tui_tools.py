"""The chat's conversation tools, driven through the Pilot: regenerate, edit and resend, a chat's own
settings, rename / delete / search of past chats, copying one message or code block."""

from __future__ import annotations

from pathlib import Path

from test_tui import make_app, ready, replies, send, until
from tiny import tiny_pair

from specdec_tui.chat.history import History
from specdec_tui.runtime import Runtime
from specdec_tui.tui.app import SpecDecApp
from specdec_tui.tui.screens.chat_settings import ChatSettingsScreen
from specdec_tui.tui.screens.copy_pick import CopyScreen, code_blocks, copy_choices
from specdec_tui.tui.screens.dialogs import AskText, Confirm
from specdec_tui.tui.screens.search import SearchScreen
from specdec_tui.tui.widgets.conversation_list import ConversationList
from specdec_tui.tui.widgets.prompt_input import PromptInput

CODE_REPLY = "Here:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nand a shell line:\n\n```sh\nls -la\n```"


def notified(app: SpecDecApp, text: str) -> bool:
    return any(text in n.message for n in app._notifications)


def stored(history: History, conversation: int) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in history.messages(conversation)]


async def test_regenerate_when_greedy_writes_the_same_reply_again_and_says_so():
    history = History(":memory:")
    app = make_app(history)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        first = app.chat.messages[-1]["content"]
        await pilot.press("ctrl+g")
        await until(pilot, lambda: not app.chat.busy and len(app.chat.messages) == 2)
        assert notified(app, "Greedy decoding writes the same text again")
        assert app.chat.messages[-1]["content"] == first
        assert [r for r, _ in stored(history, app.chat.conversation_id)] == ["user", "assistant"]  # replaced
        assert len(replies(app)) == 1


async def test_regenerate_when_sampling_draws_a_new_sample():
    history = History(":memory:")
    app = make_app(history, temperature=1.0, max_new_tokens=16)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        first = app.chat.messages[-1]["content"]
        await pilot.press("ctrl+g")
        await until(pilot, lambda: not app.chat.busy and len(app.chat.messages) == 2)
        assert notified(app, "Writing a new sample")
        assert app.chat.messages[-1]["content"] != first  # 16 random tokens of a tiny model: never twice the same
        assert stored(history, app.chat.conversation_id)[-1] == ("assistant", app.chat.messages[-1]["content"])


async def test_edit_and_resend_replaces_the_last_exchange():
    history = History(":memory:")
    app = make_app(history)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "first question")
        await send(pilot, "a typo'd question")
        await pilot.press("ctrl+b")
        prompt = app.query_one(PromptInput)
        assert prompt.text == "a typo'd question" and app.chat.editing == 2
        assert prompt.cursor_location == prompt.document.end  # ready to type on
        prompt.load_text("the right question")
        await pilot.press("enter")
        await until(pilot, lambda: not app.chat.busy and len(app.chat.messages) == 4)
        roles_texts = [(m["role"], m["content"]) for m in app.chat.messages]
        assert [t for r, t in roles_texts if r == "user"] == ["first question", "the right question"]
        assert stored(history, app.chat.conversation_id) == roles_texts
        assert len(replies(app)) == 2


async def test_a_chats_own_settings_are_validated_saved_and_restored_after_a_restart(tmp_path: Path):
    path = tmp_path / "history.sqlite"
    app = make_app(History(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        await pilot.press("ctrl+o")
        screen = app.screen
        assert isinstance(screen, ChatSettingsScreen)
        screen.query_one("#k").value = "99"
        await pilot.press("ctrl+s")
        assert app.screen is screen and "Not saved: k = '99'" in str(screen.query_one("#chat-settings-error").content)
        screen.query_one("#k").value = "7"
        screen.query_one("#temperature").value = "0.5"
        screen.query_one("#system_prompt").load_text("Answer in one word.")
        screen.query_one("#mode").value = "prompt-lookup"
        await pilot.press("ctrl+s")
        assert app.screen is not screen
        options = app.chat.options
        assert (options.k, options.temperature, options.mode, options.system_prompt) == (
            7, 0.5, "prompt-lookup", "Answer in one word.")
        await send(pilot, "and now?")
        assert app.history.messages(app.chat.conversation_id)[-1].metrics["mode"] == "prompt-lookup"
        chat = app.chat.conversation_id
    restarted = make_app(History(path))
    async with restarted.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert restarted.chat.options.k == 8  # a new chat starts from the settings
        restarted.chat.open_chat(chat)
        await pilot.pause()
        options = restarted.chat.options
        assert (options.k, options.temperature, options.mode, options.system_prompt) == (
            7, 0.5, "prompt-lookup", "Answer in one word.")
        await pilot.press("ctrl+n")
        assert restarted.chat.options.k == 8


async def test_chats_are_renamed_deleted_after_asking_and_found_by_search(tmp_path: Path):
    history = History(tmp_path / "history.sqlite")
    first = history.create_conversation("about heaps")
    history.add_message(first, "user", "what is a binary heap?")
    second = history.create_conversation("about sorting")
    history.add_message(second, "user", "how does merge sort work?")
    app = make_app(history)
    async with app.run_test(size=(140, 30)) as pilot:
        await ready(pilot)
        chats = app.query_one(ConversationList)
        chats.focus()
        chats.highlighted = [c.id for c in history.conversations()].index(first)
        await pilot.press("r")
        assert isinstance(app.screen, AskText)
        app.screen.query_one("Input").value = "heaps, renamed"
        await pilot.press("enter")
        assert {c.id: c.title for c in history.conversations()}[first] == "heaps, renamed"

        chats.focus()
        chats.highlighted = [c.id for c in history.conversations()].index(second)
        await pilot.press("delete")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")  # asked, and nothing is deleted on no
        assert second in [c.id for c in history.conversations()]
        await pilot.press("delete")
        await pilot.press("y")
        assert [c.id for c in history.conversations()] == [first]

        await pilot.press("ctrl+f")
        assert isinstance(app.screen, SearchScreen)
        await pilot.press(*"binary")
        await pilot.pause()
        assert "1 messages" in str(app.screen.query_one("#search-count").content)
        await pilot.press("enter", "enter")  # to the results, then open the highlighted one
        await until(pilot, lambda: not isinstance(app.screen, SearchScreen))
        assert app.chat.conversation_id == first
        assert app.chat.messages == [{"role": "user", "content": "what is a binary heap?"}]


async def test_any_message_or_code_block_can_be_copied(tmp_path: Path):
    history = History(tmp_path / "history.sqlite")
    chat = history.create_conversation("code")
    history.add_message(chat, "user", "add two numbers")
    history.add_message(chat, "assistant", CODE_REPLY)
    app = make_app(history)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        app.chat.open_chat(chat)
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, CopyScreen)
        shown = [label for label, _ in app.screen.choices]
        assert shown[0] == "You: add two numbers" and shown[2] == "    code (python): def add(a, b):…"
        await pilot.press("up", "enter")  # the last entry is the shell line; one up is the Python block
        await until(pilot, lambda: not isinstance(app.screen, CopyScreen))
        assert app.clipboard == "def add(a, b):\n    return a + b"


def test_code_blocks_are_found_with_their_language_even_when_unclosed():
    assert code_blocks(CODE_REPLY) == [("python", "def add(a, b):\n    return a + b"), ("sh", "ls -la")]
    assert code_blocks("```\nhalf written") == [("", "half written")]
    assert [text for _, text in copy_choices([{"role": "user", "content": "hi"}])] == ["hi"]


def test_the_chat_settings_screen_snapshot(snap_compare):
    async def opened(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        await pilot.press("ctrl+o")
        await pilot.pause()

    pair = tiny_pair()
    app = SpecDecApp(make_app().settings, load=lambda s, p: Runtime.from_pair(s, pair), history=History(":memory:"))
    assert snap_compare(app, terminal_size=(100, 34), run_before=opened)


def test_the_search_screen_snapshot(snap_compare, tmp_path: Path):
    history = History(tmp_path / "history.sqlite")
    chat = history.create_conversation("binary search")
    history.add_message(chat, "user", "Write a binary search in Python.")
    history.add_message(chat, "assistant", "Use the bisect module: bisect_left finds the insertion point.")

    async def searched(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        await pilot.press("ctrl+f")
        await until(pilot, lambda: isinstance(pilot.app.screen, SearchScreen) and pilot.app.screen.query("#search-input"))
        await pilot.press(*"bisect")
        await pilot.pause()
        pilot.app.screen.query_one("#search-input").cursor_blink = False
        await pilot.pause()

    assert snap_compare(make_app(history), terminal_size=(100, 30), run_before=searched)


async def test_brackets_in_titles_and_messages_are_shown_as_written(tmp_path: Path):
    history = History(tmp_path / "history.sqlite")
    chat = history.create_conversation("what does [x for x in y] do?")
    history.add_message(chat, "user", "what does [x for x in y] do? [/b]")
    app = make_app(history)
    async with app.run_test(size=(140, 30)) as pilot:
        await ready(pilot)
        chats = app.query_one(ConversationList)
        assert "what does [x for x in y] do?" in chats.get_option_at_index(0).prompt.plain
        app.chat.open_chat(chat)
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, CopyScreen)
        assert app.screen.query_one("OptionList").get_option_at_index(0).prompt.plain.endswith("[/b]")


def test_the_speculation_report_snapshot(snap_compare):
    from specdec_tui.engine.decoder import Origin, StepEvent, Token
    from specdec_tui.engine.metrics import StepRecord, summarize
    from specdec_tui.tui.screens.report import ReportScreen

    def step(pieces: list[tuple[str, Origin]], drafted: int, rejected: str | None = None) -> StepEvent:
        accepted = sum(origin is Origin.DRAFT for _, origin in pieces)
        record = StepRecord(drafted=drafted, accepted=accepted, emitted=len(pieces), draft_s=0.02 * drafted,
                            verify_s=0.1)
        return StepEvent(tuple(Token(i, origin, text) for i, (text, origin) in enumerate(pieces)), record,
                         Token(0, Origin.DRAFT, rejected) if rejected else None)

    D, T = Origin.DRAFT, Origin.TARGET
    steps = [step([("def", D), (" add", D), ("(a", D), (",", D), (" b", T)], 4),
             step([("):", D), ("\n", T)], 4, rejected=" #"),
             step([("    return", D), (" a", D), (" +", D), (" b", D), ("\n", T)], 4)]
    summary = summarize([s.record for s in steps], mode="hybrid", prompt_tokens=12, seconds=0.6, ttft_s=0.2,
                        finish_reason="eos")

    async def opened(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        pilot.app.push_screen(ReportScreen("Speculation report · hybrid k=4 tau=1 · 12 tokens", summary, steps,
                                           "green", "bold yellow"))
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(100, 40), run_before=opened)
