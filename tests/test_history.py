"""The SQLite chat history."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specdec_tui.chat.history import History, HistoryError


def test_messages_and_metrics_round_trip_through_the_file(tmp_path: Path):
    path = tmp_path / "h.sqlite"
    history = History(path)
    chat = history.create_conversation("first question")
    history.add_message(chat, "user", "hi")
    history.add_message(chat, "assistant", "hello", {"tokens_per_s": 12.5, "acceptance_rate": 0.9})
    history.close()
    reopened = History(path)
    [info] = reopened.conversations()
    assert (info.title, info.messages) == ("first question", 2)
    messages = reopened.messages(chat)
    assert [(m.role, m.content) for m in messages] == [("user", "hi"), ("assistant", "hello")]
    assert messages[1].metrics == {"tokens_per_s": 12.5, "acceptance_rate": 0.9}
    assert messages[0].metrics is None


def test_conversations_are_listed_most_recent_first(tmp_path: Path):
    history = History(tmp_path / "h.sqlite")
    older = history.create_conversation("older")
    newer = history.create_conversation("newer")
    assert [c.id for c in history.conversations()] == [newer, older]
    history.add_message(older, "user", "bump")
    assert [c.id for c in history.conversations()] == [older, newer]


def test_deleting_a_conversation_deletes_its_messages(tmp_path: Path):
    history = History(tmp_path / "h.sqlite")
    chat = history.create_conversation("x")
    history.add_message(chat, "user", "a")
    history.delete(chat)
    assert history.conversations() == []
    assert history.conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "h.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryError, match=f"cannot open chat history {path}"):
        History(path)


def test_a_failed_write_raises_history_error_and_keeps_earlier_rows(tmp_path: Path):
    history = History(tmp_path / "h.sqlite")
    chat = history.create_conversation("x")
    history.add_message(chat, "user", "kept")
    with pytest.raises(HistoryError):
        history.add_message(chat, "robot", "not a role")  # violates the CHECK: the transaction rolls back
    assert [m.content for m in history.messages(chat)] == ["kept"]


def test_a_full_disk_message_says_the_chat_is_not_being_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    history = History(tmp_path / "h.sqlite")
    chat = history.create_conversation("x")

    class FullDisk:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> bool:
            return False

        def execute(self, *args: object) -> None:
            raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(history, "conn", FullDisk(history.conn))
    with pytest.raises(HistoryError, match="is full; the chat continues but is not being saved"):
        history.add_message(chat, "user", "hello")
