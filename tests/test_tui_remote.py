"""The chat TUI as a client of a running specdec-serve: the same reply, origins, panel and compare."""

from __future__ import annotations

import pytest
from serving import running_server, tiny_runtime
from test_tui import replies, send, settings, until

from specdec_tui.chat.history import History
from specdec_tui.client import RemoteSource
from specdec_tui.engine.decoder import FinishedEvent, Origin
from specdec_tui.models.errors import ModelError
from specdec_tui.tui.app import SpecDecApp
from specdec_tui.tui.widgets.compare_view import CompareView
from specdec_tui.tui.widgets.loading_panel import LoadingPanel
from specdec_tui.tui.widgets.message_view import MessageView
from specdec_tui.tui.widgets.prompt_input import PromptInput


def remote_app(url: str, **decoding: object) -> SpecDecApp:
    return SpecDecApp(settings(**decoding), load=lambda s, p: RemoteSource(url).connect(p),
                      history=History(":memory:"))


async def test_a_reply_over_http_is_the_in_process_reply_with_origins_and_panel():
    runtime = tiny_runtime()
    local = settings(adaptive_k=False)  # a fixed K, so both runs draft alike and their counts compare
    messages = [{"role": "system", "content": local.chat.system_prompt}, {"role": "user", "content": "def add(a, b):"}]
    params = runtime.params(max_new_tokens=24, adaptive_k=False)
    expected = list(runtime.reply(messages, params, "hybrid", fresh=True))[-1]
    assert isinstance(expected, FinishedEvent)
    with running_server(runtime) as (url, _):
        app = remote_app(url, adaptive_k=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.source is not None)
            assert app.sub_title == "tiny-qwen2 ← tiny-qwen2-draft"
            await send(pilot, "def add(a, b):")
            _run, finished = app.chat.last_run
            assert finished.token_ids == expected.token_ids
            assert replies(app)[-1].content == expected.text
            assert finished.summary.mode == "hybrid" and finished.summary.new_tokens == 24
            assert finished.summary.accepted == expected.summary.accepted
            origins = {origin for _, origin in replies(app)[-1].spans}
            assert Origin.DRAFT in origins and Origin.TARGET in origins
            await pilot.press("f7")
            await until(pilot, lambda: bool(app.query(CompareView)) and not app.chat.busy)
            compare = app.query_one(CompareView)
            assert compare.first.token_ids == compare.second.token_ids  # lossless, also over HTTP


async def test_a_server_error_is_a_message_in_the_chat_and_the_chat_goes_on():
    with running_server(tiny_runtime()) as (url, _):
        app = remote_app(url)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.source is not None)
            await send(pilot, "word " * 400)
            errors = [v for v in app.query(MessageView) if v.role == "error"]
            assert errors and "context holds 256" in errors[0].content
            await pilot.press("ctrl+n")
            await send(pilot, "hello")
            assert app.chat.last_run is not None and app.chat.last_run[1].summary.new_tokens > 0


def test_an_unreachable_server_is_a_clear_error():
    with pytest.raises(ModelError, match="cannot reach specdec-serve at http://127.0.0.1:9"):
        RemoteSource("http://127.0.0.1:9").connect()


async def test_the_app_waits_for_a_server_still_loading():
    with running_server(None) as (url, state):
        app = remote_app(url)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(1.5)
            assert app.source is None and app.query_one(LoadingPanel).display
            state.ready(tiny_runtime(settings=state.settings))
            await until(pilot, lambda: app.source is not None, seconds=10)


async def test_escape_over_http_keeps_the_partial_reply_and_frees_the_server():
    with running_server(tiny_runtime(delay=0.05)) as (url, state):
        app = remote_app(url, max_new_tokens=200)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.source is not None)
            app.query_one(PromptInput).load_text("write a lot")
            await pilot.press("enter")
            await until(pilot, lambda: bool(replies(app)) and len(replies(app)[-1].spans) > 3)
            await pilot.press("escape")
            await until(pilot, lambda: not app.chat.busy)
            _run, finished = app.chat.last_run
            assert finished.summary.finish_reason == "cancelled"
            assert 0 < len(finished.token_ids) < 200
            assert replies(app)[-1].content == finished.text
            await until(pilot, lambda: state.worker is not None and state.worker.running is None, seconds=5)
