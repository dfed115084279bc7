"""A conversation as Markdown and as JSON, each reply with how it was decoded and what that cost."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specdec_tui.chat.history import StoredMessage

ROLE_HEADINGS = {"user": "You", "assistant": "Assistant", "system": "System"}


def metrics_line(metrics: dict[str, Any]) -> str:
    """``mode hybrid · K 4 · tau 1 · acceptance 74% · 18.7 tok/s · 48 tokens``."""
    parts = [f"mode {metrics.get('mode')}"]
    if metrics.get("mode") != "target":
        parts += [f"K {metrics.get('k')}", f"tau {metrics.get('tau'):g}"]
    if metrics.get("acceptance_rate") is not None:
        parts.append(f"acceptance {metrics['acceptance_rate']:.0%}")
    parts += [f"{metrics.get('tokens_per_s', 0):.1f} tok/s", f"{metrics.get('new_tokens')} tokens"]
    return " · ".join(parts)


def to_markdown(title: str, messages: Sequence[StoredMessage]) -> str:
    out = [f"# {title}", ""]
    for message in messages:
        out += [f"## {ROLE_HEADINGS.get(message.role, message.role)}", "", message.content, ""]
        if message.metrics:
            out += [f"*{metrics_line(message.metrics)}*", ""]
    return "\n".join(out)


def to_json(title: str, messages: Sequence[StoredMessage]) -> str:
    return json.dumps({"title": title, "messages": [
        {"role": m.role, "content": m.content, **({"metrics": m.metrics} if m.metrics else {})} for m in messages
    ]}, ensure_ascii=False, indent=2)


def export_conversation(folder: Path, conversation_id: int, title: str,
                        messages: Sequence[StoredMessage]) -> tuple[Path, Path]:
    """Write ``chat-<id>-<time>.md`` and ``.json`` into ``folder``; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"chat-{conversation_id}-{time.strftime('%Y%m%d-%H%M%S')}"
    markdown, data = stem.with_suffix(".md"), stem.with_suffix(".json")
    markdown.write_text(to_markdown(title, messages))
    data.write_text(to_json(title, messages))
    return markdown, data
