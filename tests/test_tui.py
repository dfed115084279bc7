"""The chat app driven through Textual's Pilot, on the real engine with tiny models."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from tiny import SlowRunner, tiny_pair

from specdec_tui.chat.history import History, HistoryError
from specdec_tui.config import Settings, SettingsError, load_settings
from specdec_tui.models.errors import ModelError
from specdec_tui.models.loader import ModelPair
from specdec_tui.runtime import Runtime
from specdec_tui.tui import themes
from specdec_tui.tui.app import SpecDecApp
from specdec_tui.tui.keys import KEY_IDS, KEYS
from specdec_tui.tui.screens.report import ReportScreen
from specdec_tui.tui.widgets.compare_view import CompareView
from specdec_tui.tui.widgets.conversation_list import ConversationList
from specdec_tui.tui.widgets.loading_panel import LoadingPanel
from specdec_tui.tui.widgets.message_view import MessageView
from specdec_tui.tui.widgets.prompt_input import PromptInput
from specdec_tui.tui.widgets.stats_panel import StatsPanel


def settings(**decoding: object) -> Settings:
    base, _ = load_settings()
    return base.model_copy(update={"decoding": base.decoding.model_copy(update={"max_new_tokens": 24, **decoding})})


def make_app(history: History | None = None, pair: ModelPair | None = None, **decoding: object) -> SpecDecApp:
    loaded = pair or tiny_pair()
    return SpecDecApp(settings(**decoding), load=lambda s, p: Runtime.from_pair(s, loaded),
                      history=history or History(":memory:"))


async def until(pilot, condition, seconds: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await pilot.pause(0.05)


async def ready(pilot) -> SpecDecApp:  # type: ignore[no-untyped-def]
    app = pilot.app
    await until(pilot, lambda: app.source is not None)
    return app


def settled(app: SpecDecApp) -> int:
    """How many exchanges have ended: replies stored plus errors shown."""
    return sum(m["role"] == "assistant" for m in app.chat.messages) + len(
        [v for v in app.query(MessageView) if v.role == "error"])


async def send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    """Type ``text``, press Enter and wait until the reply (or an error) has landed."""
    app = pilot.app
    before = settled(app)
    app.query_one(PromptInput).focus()
    app.query_one(PromptInput).load_text(text)
    await pilot.press("enter")
    await until(pilot, lambda: settled(app) > before and not app.chat.busy)


def replies(app: SpecDecApp) -> list[MessageView]:
    return [v for v in app.query(MessageView) if v.role == "assistant"]


def _plain(static) -> str:  # type: ignore[no-untyped-def]
    """What a Static shows, as plain text."""
    console = Console(width=60, record=True, color_system=None)
    console.print(static.content)
    return console.export_text()


def knob(app: SpecDecApp, name: str) -> str:
    """The value the side panel shows for setting ``name``."""
    for line in _plain(app.query_one("#knobs")).splitlines():
        parts = line.split()
        if parts and parts[0] == name:
            return " ".join(parts[1:])
    raise AssertionError(f"{name} is not in the panel")


async def test_a_message_gets_a_streamed_reply_that_is_stored():
    history = History(":memory:")
    app = make_app(history)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "def add(a, b):")
        reply = replies(app)[-1]
        _run, finished = app.chat.last_run
        assert reply.content == finished.text and len(finished.token_ids) == 24
        assert reply.metrics["new_tokens"] == 24
        assert reply.spans, "the reply streamed in as token pieces"
        stored = history.messages(app.chat.conversation_id)
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[1].content == finished.text
        assert stored[1].metrics["mode"] == "hybrid"
        assert "tokens/s" in _plain(app.query_one("#live"))


async def test_k_and_tau_keys_change_the_panel_at_once_and_the_next_reply():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        assert (knob(app, "K"), knob(app, "tau")) == ("8", "1")
        await pilot.press("f3", "f3", "f4")
        assert (knob(app, "K"), knob(app, "tau")) == ("10", "0.9")
        await send(pilot, "hello")
        run, finished = app.chat.last_run
        assert (run.params.k, run.params.tau) == (10, 0.9)
        assert finished.summary.drafted > 0
        await pilot.press("f2", "f5")
        assert (app.chat.k, app.chat.tau) == (9, 1.0)


async def test_the_mode_key_switches_to_target_only_and_back():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await pilot.press("f6")
        assert knob(app, "mode") == "target-only"
        await send(pilot, "hello")
        assert app.chat.last_run[1].summary.mode == "target"
        assert app.chat.last_run[1].summary.drafted == 0
        await pilot.press("f6")
        await send(pilot, "again")
        assert app.chat.last_run[1].summary.mode == "hybrid"


async def test_escape_cancels_mid_reply_and_keeps_the_partial_text():
    pair = tiny_pair()
    pair.target.runner = SlowRunner(pair.target.runner, 0.05)
    history = History(":memory:")
    app = make_app(history, pair, max_new_tokens=200)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        app.query_one(PromptInput).load_text("write a lot")
        await pilot.press("enter")
        await until(pilot, lambda: bool(replies(app)) and len(replies(app)[-1].content) > 3)
        await pilot.press("escape")
        await until(pilot, lambda: not app.chat.busy)
        _run, finished = app.chat.last_run
        assert finished.summary.finish_reason == "cancelled"
        assert 0 < len(finished.token_ids) < 200
        assert replies(app)[-1].content == finished.text
        assert history.messages(app.chat.conversation_id)[-1].content == finished.text


async def test_typing_works_while_a_reply_is_generated():
    pair = tiny_pair()
    pair.target.runner = SlowRunner(pair.target.runner, 0.2)
    app = make_app(pair=pair, max_new_tokens=200)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        app.query_one(PromptInput).load_text("first")
        await pilot.press("enter")
        await until(pilot, lambda: app.chat.busy)
        await pilot.press(*"next one")
        assert app.query_one(PromptInput).text == "next one"
        assert app.chat.busy
        await pilot.press("escape")
        await until(pilot, lambda: not app.chat.busy)


async def test_compare_shows_both_runs_side_by_side():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "def add(a, b):")
        await pilot.press("f7")
        await until(pilot, lambda: bool(app.query(CompareView)))
        view = app.query_one(CompareView)
        assert view.first.label == "speculative (hybrid)" and view.second.label == "target-only"
        assert view.difference is None  # greedy, tau = 1: identical text
        assert "identical text" in view.verdict()
        assert view.speedup > 0


async def test_history_survives_a_restart(tmp_path: Path):
    path = tmp_path / "history.sqlite"
    app = make_app(History(path))
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "remember me")
        reply = app.chat.last_run[1].text
    app = make_app(History(path))
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        chats = app.query_one(ConversationList)
        assert chats.option_count == 1
        assert "remember me" in str(chats.get_option_at_index(0).prompt)
        chats.focus()
        await pilot.press("down", "enter")
        await until(pilot, lambda: len(app.query(MessageView)) == 2)
        views = list(app.query(MessageView))
        assert (views[0].content, views[1].content) == ("remember me", reply)
        assert views[1].metrics["new_tokens"] == 24
        assert app.chat.messages[-1]["content"] == reply


async def test_a_broken_theme_file_is_reported_and_the_default_theme_used(tmp_path: Path, monkeypatch):
    (tmp_path / "good.toml").write_text('name = "specdec-dark"\nprimary = "#4EA1FF"\n')
    (tmp_path / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    (tmp_path / "garbled.toml").write_text("name = [\n")
    monkeypatch.setattr(themes, "theme_dirs", lambda: [tmp_path])
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        messages = [n.message for n in app._notifications]
        assert any("broken.toml has a bad colour" in m for m in messages)
        assert any("garbled.toml cannot be read" in m for m in messages)
        assert app.theme == "specdec-dark"


async def test_a_load_failure_is_a_message_in_the_app():
    def failing(settings, progress):  # type: ignore[no-untyped-def]
        raise ModelError("model path /nope does not exist")

    app = SpecDecApp(settings(), load=failing, history=History(":memory:"))
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.query_one(LoadingPanel)
        await until(pilot, lambda: panel.has_class("-failed"))
        assert "model path /nope does not exist" in str(panel.query_one("#loading-detail").render())
        app.query_one(PromptInput).load_text("hello?")
        await pilot.press("enter")
        assert app.query_one(PromptInput).text == "hello?"  # nothing lost


async def test_an_over_long_prompt_is_an_error_in_the_chat_and_keeps_the_message():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "word " * 400)
        errors = [v for v in app.query(MessageView) if v.role == "error"]
        assert errors and "context holds 256" in errors[0].content
        assert app.chat.messages[-1]["role"] == "user"


async def test_prompt_recall_and_newline_keys():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "first prompt")
        await send(pilot, "second prompt")
        prompt = app.query_one(PromptInput)
        await pilot.press("up")
        assert prompt.text == "second prompt"
        await pilot.press("up")
        assert prompt.text == "first prompt"
        await pilot.press("down", "down")
        assert prompt.text == ""
        await pilot.press("a", "ctrl+j", "b")
        assert prompt.text == "a\nb"


async def test_origin_colours_toggle_and_new_chat():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        reply = replies(app)[-1]
        assert not reply.show_origins
        await pilot.press("f8")
        assert reply.show_origins and reply.query_one(".message--stream").display
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert not app.query(MessageView) and app.chat.messages == [] and app.chat.conversation_id is None


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_the_layout_fits_small_terminals_and_uses_big_ones(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        log, prompt, panel = app.query_one("#log"), app.query_one(PromptInput), app.query_one(StatsPanel)
        assert log.region.width >= 40 and prompt.region.height >= 3
        assert panel.region.width > 0
        assert app.query_one(ConversationList).display == (size[0] >= 120)


def test_main_screen_snapshot(snap_compare):
    async def loaded(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        # A blinking cursor would be captured in whichever phase the clock happens to be in.
        pilot.app.query_one(PromptInput).cursor_blink = False
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=loaded)


async def test_a_history_write_failure_is_reported_and_the_chat_goes_on(monkeypatch):
    history = History(":memory:")

    def full_disk(*args: object, **kwargs: object) -> int:
        raise HistoryError("the disk holding h.sqlite is full; the chat continues but is not being saved")

    monkeypatch.setattr(history, "add_message", full_disk)
    app = make_app(history)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        assert [m["role"] for m in app.chat.messages] == ["user", "assistant"]  # nothing lost on screen
        assert any("is full" in n.message for n in app._notifications)


async def test_the_live_time_to_first_token_counts_the_prompt_read_like_the_final_one():
    pair = tiny_pair()
    pair.target.runner = SlowRunner(pair.target.runner, 0.15)  # the prompt read is one slow target pass
    app = make_app(pair=pair, max_new_tokens=12)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        app.query_one(PromptInput).load_text("hello")
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.chat.records))
        live = next(line for line in _plain(app.query_one("#live")).splitlines() if line.split()[:1] == ["TTFT"])
        live_ms = float(live.split()[1])
        await until(pilot, lambda: not app.chat.busy)
        final_ms = 1000 * app.chat.last_run[1].summary.ttft_s
        assert live_ms >= 140  # the prompt's pass, 150 ms, gives the first token
        assert abs(live_ms - final_ms) < 75  # leaving out the prompt's pass would be 150 ms off


async def test_a_key_rebound_in_the_config_moves_everywhere_it_is_shown():
    base = settings()
    app = SpecDecApp(base.model_copy(update={"keys": {"compare": "f10", "k_up": "ctrl+k"}}),
                     load=lambda s, p: Runtime.from_pair(s, tiny_pair()), history=History(":memory:"))
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+k")
        assert app.chat.k == 9  # the new key works
        await pilot.press("f3")
        assert app.chat.k == 9  # the old one no longer does
        assert "f10 Compare" in _plain(app.query_one(".welcome"))
        await pilot.press("f1")
        help_text = _plain(app.screen.query_one("#help-keys"))
        assert "f10" in help_text and "run the last prompt again in the other mode" in help_text
        assert app.chat.key_display("k_up") == "^k" and "^k draft one more token per step" in " ".join(help_text.split())
        await pilot.press("escape")
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert commands["Run the last prompt again in the other mode, side by side"] == "f10"
        assert set(KEY_IDS) - {"quit"} <= {k.id for k in KEYS if k.description[:1].upper() + k.description[1:]
                                            in commands}


def test_an_unknown_key_binding_in_the_config_is_one_clear_error(tmp_path: Path):
    config = tmp_path / "config.toml"
    config.write_text('[keys]\ncompair = "f10"\n')
    with pytest.raises(SettingsError, match=r"unknown key keys\.compair in .*config\.toml"):
        load_settings(config=config)
    config.write_text('[keys]\ncompare = ""\n')
    with pytest.raises(SettingsError, match=r"keys\.compare must name one or more keys"):
        load_settings(config=config)


def test_the_bundled_themes_ship_as_package_data():
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = root / "specdec_tui"
    files = sorted(themes.BUNDLED.glob("*.toml"))
    assert {f.name for f in files} == {f.name for f in (root / "themes").glob("*.toml")} and files
    for file in files:
        inside = (themes.BUNDLED.relative_to(package) / file.name).as_posix()
        assert any(fnmatch.fnmatch(inside, p) for p in patterns["specdec_tui"]), inside
    assert "specdec-dark" in {t.name for t in themes.load_themes().themes}


async def test_the_speculation_report_shows_origins_acceptance_timing_and_each_rejection():
    app = make_app(adaptive_k=False, k=4)
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+r")
        assert not isinstance(app.screen, ReportScreen)  # nothing to report yet
        await send(pilot, "def add(a, b):")
        _run, finished = app.chat.last_run
        steps = app.chat.last_steps
        await pilot.press("ctrl+r")
        await until(pilot, lambda: isinstance(app.screen, ReportScreen))
        report = app.screen
        assert _plain(report.query_one("#report-reply")).replace("\n", "") == "".join(
            t.text for s in steps for t in s.tokens).replace("\n", "")
        histogram = _plain(report.query_one("#report-histogram"))
        counted = sum(int(line.split()[-1]) for line in histogram.splitlines() if line.startswith("kept"))
        assert counted == sum(1 for s in steps if s.record.drafted)
        wrong = [s for s in steps if s.rejected is not None]
        rows = [line for line in _plain(report.query_one("#report-rejections")).splitlines()[1:] if line.strip()]
        assert wrong and len(rows) == len(wrong)
        assert [int(row.split()[0]) for row in rows] == [steps.index(s) + 1 for s in wrong]
        assert "drafting" in _plain(report.query_one("#report-timing"))
        assert f"{finished.summary.new_tokens} tokens" in str(report.query_one("#report-title").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, ReportScreen)


async def test_compare_shows_both_texts_and_marks_the_first_token_where_they_differ():
    app = make_app(adaptive_k=False, k=4, tau=0.2, max_new_tokens=30)  # lenient: the texts part somewhere
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(pilot)
        await send(pilot, "def add(a, b):")
        await pilot.press("f7")
        await until(pilot, lambda: bool(app.query(CompareView)) and not app.chat.busy)
        view = app.query_one(CompareView)
        first = view.difference
        assert first is not None and "texts differ from token" in view.verdict()
        for run in (view.first, view.second):
            assert "".join(run.pieces) and len(run.pieces) == len(run.token_ids)
            marked = view.marked(run)
            assert marked.plain == "".join(run.pieces)
            mark = [s for s in marked.spans if s.style == "reverse bold"]
            if first < len(run.pieces):
                assert len(mark) == 1 and mark[0].start == len("".join(run.pieces[:first]))
        texts = [_plain(static) for static in view.query(".compare--text")]
        assert len(texts) == 2


def test_identical_runs_are_shown_unmarked():
    from specdec_tui.engine.metrics import summarize
    from specdec_tui.tui.widgets.compare_view import CompareRun

    summary = summarize([], mode="hybrid", prompt_tokens=1, seconds=1.0, ttft_s=0.1, finish_reason="length")
    run = CompareRun("speculative (hybrid)", summary, (1, 2), "ab", ("a", "b"))
    view = CompareView(run, CompareRun("target-only", replace(summary, mode="target"), (1, 2), "ab", ("a", "b")))
    assert view.difference is None and view.marked(run).spans == []


async def test_a_message_typed_while_the_models_load_is_sent_when_they_are_ready():
    loaded = threading.Event()
    pair = tiny_pair()

    def slow_load(settings, progress):  # type: ignore[no-untyped-def]
        assert loaded.wait(20)
        return Runtime.from_pair(settings, pair)

    history = History(":memory:")
    app = SpecDecApp(settings(), load=slow_load, history=history)
    async with app.run_test(size=(100, 30)) as pilot:
        app.query_one(PromptInput).load_text("def add(a, b):")
        await pilot.press("enter")
        assert app.chat.queued == "def add(a, b):" and app.query_one(PromptInput).text == ""
        app.query_one(PromptInput).load_text("and another")
        await pilot.press("enter")
        assert app.query_one(PromptInput).text == "and another"  # one waits at a time; this one is kept
        loaded.set()
        await until(pilot, lambda: app.chat.last_run is not None and not app.chat.busy)
        assert [m.role for m in history.messages(app.chat.conversation_id)] == ["user", "assistant"]
        assert [v.role for v in app.query(MessageView)] == ["user", "assistant"]  # shown once
        assert app.chat.queued is None


async def test_a_queued_message_goes_back_to_the_box_if_the_models_fail_to_load():
    release = threading.Event()

    def failing(settings, progress):  # type: ignore[no-untyped-def]
        assert release.wait(20)
        raise ModelError("model path /nope does not exist")

    app = SpecDecApp(settings(), load=failing, history=History(":memory:"))
    async with app.run_test(size=(100, 30)) as pilot:
        app.query_one(PromptInput).load_text("hello?")
        await pilot.press("enter")
        release.set()
        await until(pilot, lambda: app.query_one(LoadingPanel).has_class("-failed"))
        assert app.query_one(PromptInput).text == "hello?" and app.chat.queued is None
        assert not [v for v in app.query(MessageView) if v.role == "user"]  # shown only while it waited


async def test_a_chat_exports_to_markdown_and_json_with_each_replys_metrics():
    import json
    import os

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+s")
        assert any("Nothing to export yet" in n.message for n in app._notifications)
        await send(pilot, "def add(a, b):")
        await pilot.press("ctrl+s")
        folder = Path(os.environ["XDG_DATA_HOME"]) / "specdec-tui" / "exports"
        [markdown] = folder.glob("*.md")
        [data] = folder.glob("*.json")
        assert any(str(markdown) in n.message for n in app._notifications)  # the path is shown
        _run, finished = app.chat.last_run
        text = markdown.read_text()
        assert "## You\n\ndef add(a, b):" in text and f"## Assistant\n\n{finished.text}" in text
        assert "*mode hybrid · K 8 · tau 1 · " in text and f"{finished.summary.new_tokens} tokens*" in text
        exported = json.loads(data.read_text())
        assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]
        assert exported["messages"][1]["content"] == finished.text
        assert exported["messages"][1]["metrics"]["new_tokens"] == finished.summary.new_tokens
        assert exported["messages"][1]["metrics"]["mode"] == "hybrid"


def faulty_app(**faults: object) -> SpecDecApp:
    from specdec_tui.config import FaultSettings, ResilienceSettings

    base = settings()
    chosen = base.model_copy(update={"faults": FaultSettings(**faults),  # type: ignore[arg-type]
                                     "resilience": ResilienceSettings(fail_max=2, reset_timeout=60)})
    pair = tiny_pair()
    return SpecDecApp(chosen, load=lambda s, p: Runtime.from_pair(s, pair), history=History(":memory:"))


async def test_a_degraded_reply_shows_a_banner_marks_its_tokens_and_is_stored_as_degraded():
    app = faulty_app(target_nan=1.0)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        assert "FAULT INJECTION ON: target.nan=1" in app.sub_title
        await send(pilot, "hello")
        banner = app.chat.query_one("#degraded")
        assert banner.has_class("-shown") and "DEGRADED" in _plain(banner)
        shown = " ".join(_plain(banner).split())
        assert "target model failed 2 passes in a row (last: the target model returned NaN logits)" in shown
        view = replies(app)[-1]
        assert view.degraded and view.query_one(".message--stream").display  # kept as marked text
        assert "24 tokens unverified" in str(view.query_one(".message--meta").content)
        stored = app.history.messages(app.chat.conversation_id)[-1]
        assert stored.metrics["degraded_tokens"] == 24 and stored.metrics["target_failures"] == 2


async def test_a_failing_draft_says_so_and_the_reply_is_still_the_targets():
    app = faulty_app(draft_raise=1.0)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        banner = app.chat.query_one("#degraded")
        assert banner.has_class("-shown") and "Draft model failing" in _plain(banner)
        assert not replies(app)[-1].degraded


async def test_without_faults_there_is_no_banner_and_no_warning():
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        assert not app.chat.query_one("#degraded").has_class("-shown")
        assert "FAULT" not in app.sub_title


async def test_a_reply_being_written_is_saved_as_it_streams(tmp_path: Path):
    pair = tiny_pair()
    pair.target.runner = SlowRunner(pair.target.runner, 0.05)
    history = History(tmp_path / "h.sqlite")
    app = make_app(history, pair=pair, max_new_tokens=200)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        app.query_one(PromptInput).load_text("hello")
        await pilot.press("enter")
        await until(pilot, lambda: any(m.role == "assistant" and m.content
                                       for m in History(tmp_path / "h.sqlite").messages(1)))
        assert app.chat.busy  # saved while still being written
        stored = History(tmp_path / "h.sqlite").messages(1)
        assert stored[-1].metrics == {"partial": True}
        app.chat.action_cancel()
        await until(pilot, lambda: not app.chat.busy)
        final = History(tmp_path / "h.sqlite").messages(1)
        assert [m.role for m in final] == ["user", "assistant"]  # the same row, now whole
        assert final[-1].metrics["finish_reason"] == "cancelled" and final[-1].content == app.chat.messages[-1]["content"]
