"""The SQLite chat history."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specdec_tui.chat.history import SCHEMA_VERSION, History, HistoryError


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


#: The schema as the release before per-chat settings and search wrote it (user_version 0).
RELEASE_0_SCHEMA = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL, metrics TEXT, created REAL NOT NULL);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
INSERT INTO conversations VALUES (1, 'sorting', 1.0, 2.0);
INSERT INTO messages VALUES (1, 1, 'user', 'How do I sort a dict by value?', NULL, 1.0);
INSERT INTO messages VALUES (2, 1, 'assistant', 'Use sorted(d.items(), key=lambda kv: kv[1]).', '{"mode": "hybrid"}', 2.0);
"""


def test_a_file_from_the_previous_release_is_upgraded_in_place_and_keeps_everything(tmp_path: Path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as old:
        old.executescript(RELEASE_0_SCHEMA)
    history = History(path)
    assert history.schema_version == SCHEMA_VERSION
    assert [(m.role, m.content, m.metrics) for m in history.messages(1)] == [
        ("user", "How do I sort a dict by value?", None),
        ("assistant", "Use sorted(d.items(), key=lambda kv: kv[1]).", {"mode": "hybrid"})]
    assert [hit.message_id for hit in history.search("sorted")] == [2]  # old messages are searchable
    assert history.chat_settings(1) is None
    history.set_chat_settings(1, {"k": 6})
    history.close()
    reopened = History(path)  # opening an upgraded file changes nothing
    assert reopened.schema_version == SCHEMA_VERSION and reopened.chat_settings(1) == {"k": 6}
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_file_from_a_newer_release_is_refused_with_a_clear_error(tmp_path: Path):
    path = tmp_path / "new.sqlite"
    with sqlite3.connect(path) as newer:
        newer.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(HistoryError, match="written by a newer specdec-tui"):
        History(path)


def test_search_finds_words_across_chats_and_follows_edits_and_deletes(tmp_path: Path):
    history = History(tmp_path / "h.sqlite")
    first, second = history.create_conversation("one"), history.create_conversation("two")
    history.add_message(first, "user", "binary search in Python")
    reply = history.add_message(first, "assistant", "Use the bisect module.")
    history.add_message(second, "user", "What is a binary heap?")
    assert {hit.conversation_id for hit in history.search("binary")} == {first, second}
    assert [hit.snippet for hit in history.search("bis")] == ["Use the [bisect] module."]  # word starts match
    assert history.search('bisect" OR "heap') == []  # the text is words, never FTS syntax
    history.update_message(reply, "Use heapq instead.")
    assert history.search("bisect") == [] and [h.message_id for h in history.search("heapq")] == [reply]
    history.delete(second)
    assert [hit.conversation_id for hit in history.search("binary")] == [first]
    assert history.search("   ") == []
