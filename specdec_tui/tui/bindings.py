"""Textual bindings made from the one table of keys (``keys``)."""

from __future__ import annotations

from textual.binding import Binding

from specdec_tui.tui.keys import KEYS


def key_bindings(*, app_level: bool = False, scope: str | None = None) -> list[Binding]:
    """Bindings made from the one table of keys: the app's own (quit), the conversation's, or those of a
    ``scope`` (a widget of the chat, whose keys act on the chat screen only while it has the focus)."""
    groups = {k.group: Binding.Group(k.group, compact=True) for k in KEYS if k.group}
    return [Binding(k.key, f"screen.{k.action}" if scope else k.action.removeprefix("app."), k.label,
                    priority=scope is None, tooltip=k.description, id=k.id,
                    group=groups.get(k.group) if k.group else None)
            for k in KEYS if k.action.startswith("app.") == app_level and k.scope == scope]
