"""Crashes lose nothing: the chat killed with SIGKILL mid-reply, a full disk, a killed model conversion."""

from __future__ import annotations

import os
import pty
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specdec_tui.chat.history import History, HistoryError

TESTS = Path(__file__).parent

CHAT_PROCESS = """
import sys
sys.path.insert(0, {tests!r})
from tiny import SlowRunner, tiny_pair
import pytest

from specdec_tui.chat.history import History, HistoryError
from specdec_tui.config import load_settings
from specdec_tui.runtime import Runtime
from specdec_tui.tui.app import SpecDecApp

base = load_settings()[0]
settings = base.model_copy(update={{"decoding": base.decoding.model_copy(update={{"max_new_tokens": 400}})}})
pair = tiny_pair()
# The tiny model's context ends the reply near 190 tokens: at 0.2 s a pass it takes several seconds,
# far longer than the two partial saves (0.5 s apart) the test waits for before the kill.
pair.target.runner = SlowRunner(pair.target.runner, 0.2)

def load(settings, progress):
    runtime = Runtime.from_pair(settings, pair)
    runtime.engine.decoder.eos_ids = frozenset()  # never ends early
    return runtime

SpecDecApp(settings, load=load, history=History({history!r})).run()
"""


def rows(path: Path) -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
        return conn.execute("SELECT role, content, metrics FROM messages ORDER BY id").fetchall()


def test_a_chat_killed_mid_reply_leaves_a_sound_history_with_the_reply_up_to_its_last_flush(tmp_path: Path):
    history = tmp_path / "history.sqlite"
    History(history).close()
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    proc = subprocess.Popen([sys.executable, "-c", CHAT_PROCESS.format(tests=str(TESTS), history=str(history))],
                            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    screen = bytearray()
    threading.Thread(target=_drain, args=(master, screen), daemon=True).start()  # a full pty would block the app
    try:
        deadline = time.monotonic() + 90
        while b"Type a message" not in screen:  # the app is up and reading keys
            assert time.monotonic() < deadline and proc.poll() is None, f"the chat did not start: {bytes(screen)[-2000:]!r}"
            time.sleep(0.1)
        os.write(master, b"tell me something\r")
        partial: list[str] = []
        while len(partial) < 2 or len(set(partial)) < 2:  # the reply has been saved at least twice, growing
            assert time.monotonic() < deadline, f"no partial reply was saved: {rows(history)}"
            assert proc.poll() is None, "the chat exited"
            found = [content for role, content, _ in rows(history) if role == "assistant" and content]
            if found and (not partial or found[-1] != partial[-1]):
                partial.append(found[-1])
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    with sqlite3.connect(history) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    stored = rows(history)
    assert [role for role, _, _ in stored] == ["user", "assistant"]
    assert stored[0][1] == "tell me something"
    assert stored[1][1].startswith(partial[-1]) and '"partial": true' in (stored[1][2] or "")
    reopened = History(history)  # the next start opens it normally
    [chat] = reopened.conversations()
    assert [m.role for m in reopened.messages(chat.id)] == ["user", "assistant"]
    reopened.add_message(chat.id, "user", "still here?")
    reopened.close()


def _drain(fd: int, screen: bytearray) -> None:
    try:
        while data := os.read(fd, 65536):
            screen.extend(data)
    except OSError:
        pass


async def test_a_full_disk_while_saving_is_a_clear_message_and_the_reply_stays_on_screen(tmp_path: Path):
    from test_tui import make_app, ready, replies, send

    history = History(tmp_path / "history.sqlite")
    pages = history.conn.execute("PRAGMA page_count").fetchone()[0]
    history.conn.execute(f"PRAGMA max_page_count = {pages + 8}")  # SQLite's own 'database or disk is full'
    filler = history.create_conversation("filler")
    with pytest.raises(HistoryError, match="is full"):
        while True:  # fill every page, so no message of more than a few bytes fits
            history.add_message(filler, "user", "x" * 64)
    app = make_app(history)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await send(pilot, "hello " * 30)
        assert any("is full; the chat continues but is not being saved" in n.message for n in app._notifications)
        assert [m["role"] for m in app.chat.messages] == ["user", "assistant"]
        assert replies(app)[-1].content and not app.chat.busy
