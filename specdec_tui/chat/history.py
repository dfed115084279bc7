"""Chat history in SQLite: conversations and their messages, each reply with its metrics.

Every write is its own transaction, so a crash loses nothing committed; a reply being written is
stored as it streams (see ``ChatScreen``), so a crash keeps it up to its latest flush. Errors (a
full disk, an unreadable file) surface as ``HistoryError`` with a one-line message.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    metrics TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

#: What each schema version adds to the one before; ``PRAGMA user_version`` says which a file has.
#: A file made by an older release is upgraded in place, in one transaction, when it is opened.
MIGRATIONS: tuple[str, ...] = (
    # 1: per-chat settings, and full-text search over every message (kept in step by triggers).
    """
    ALTER TABLE conversations ADD COLUMN settings TEXT;
    CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
    INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(Exception):
    """The history database could not be read or written."""


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    content: str
    metrics: dict[str, Any] | None


@dataclass(frozen=True)
class ConversationInfo:
    id: int
    title: str
    updated: float
    messages: int


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    title: str
    message_id: int
    role: str
    #: The matching part of the message, the matched words in [brackets].
    snippet: str


def fts_query(text: str) -> str:
    """Words as an FTS5 query: each must appear (as a word or a word's start); no FTS syntax leaks in."""
    words = [w.replace('"', '""') for w in text.split()]
    return " ".join(f'"{w}"*' for w in words)


def _describe(exc: sqlite3.Error, path: Path) -> str:
    text = str(exc)
    if "full" in text:
        return f"the disk holding {path} is full; the chat continues but is not being saved"
    return f"chat history {path}: {text}"


class History:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            if str(path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(path), check_same_thread=False)
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.executescript(SCHEMA)
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            reason = _describe(exc, self.path) if isinstance(exc, sqlite3.Error) else str(exc)
            raise HistoryError(f"cannot open chat history {path}: {reason}") from exc

    def _migrate(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"it was written by a newer specdec-tui (schema {version}, this one "
                                        f"knows {SCHEMA_VERSION}); upgrade, or set chat.history_path elsewhere")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            # executescript commits first, so BEGIN ... COMMIT makes each step all or nothing.
            try:
                self.conn.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")
            except sqlite3.Error:
                self.conn.rollback()
                raise

    @property
    def schema_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        self.conn.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        try:
            with self.conn:
                return int(self.conn.execute(sql, params).lastrowid or 0)
        except sqlite3.Error as exc:
            raise HistoryError(_describe(exc, self.path)) from exc

    def create_conversation(self, title: str) -> int:
        now = time.time()
        return self._write("INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)",
                           (title[:80] or "New chat", now, now))

    def add_message(self, conversation_id: int, role: str, content: str,
                    metrics: dict[str, Any] | None = None) -> int:
        """Store one message and touch its conversation, in one transaction."""
        now = time.time()
        try:
            with self.conn:
                cursor = self.conn.execute(
                    "INSERT INTO messages (conversation_id, role, content, metrics, created) VALUES (?, ?, ?, ?, ?)",
                    (conversation_id, role, content, json.dumps(metrics) if metrics else None, now),
                )
                self.conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
                return int(cursor.lastrowid or 0)
        except sqlite3.Error as exc:
            raise HistoryError(_describe(exc, self.path)) from exc

    def update_message(self, message_id: int, content: str, metrics: dict[str, Any] | None = None) -> None:
        """Replace a message's text and metrics (a reply written in stages), in one transaction."""
        try:
            with self.conn:
                self.conn.execute("UPDATE messages SET content = ?, metrics = ? WHERE id = ?",
                                  (content, json.dumps(metrics) if metrics else None, message_id))
                self.conn.execute("UPDATE conversations SET updated = ? WHERE id = "
                                  "(SELECT conversation_id FROM messages WHERE id = ?)", (time.time(), message_id))
        except sqlite3.Error as exc:
            raise HistoryError(_describe(exc, self.path)) from exc

    def set_chat_settings(self, conversation_id: int, settings: dict[str, Any]) -> None:
        self._write("UPDATE conversations SET settings = ? WHERE id = ?", (json.dumps(settings), conversation_id))

    def chat_settings(self, conversation_id: int) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT settings FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Messages of every chat that contain all of ``text``'s words, best matches first."""
        query = fts_query(text)
        if not query:
            return []
        rows = self.conn.execute(
            "SELECT m.conversation_id, c.title, m.id, m.role, snippet(messages_fts, 0, '[', ']', '…', 10) "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "JOIN conversations c ON c.id = m.conversation_id "
            "WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?", (query, limit)).fetchall()
        return [SearchHit(*row) for row in rows]

    def delete_message(self, message_id: int) -> None:
        self._write("DELETE FROM messages WHERE id = ?", (message_id,))

    def rename(self, conversation_id: int, title: str) -> None:
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title[:80], conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._write("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def conversations(self) -> list[ConversationInfo]:
        rows = self.conn.execute(
            "SELECT c.id, c.title, c.updated, COUNT(m.id) FROM conversations c "
            "LEFT JOIN messages m ON m.conversation_id = c.id GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
        ).fetchall()
        return [ConversationInfo(*row) for row in rows]

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self.conn.execute(
            "SELECT id, role, content, metrics FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        ).fetchall()
        return [StoredMessage(i, role, content, json.loads(metrics) if metrics else None)
                for i, role, content, metrics in rows]
