"""Every key of the chat, once: the bindings, the footer, the command palette, the help screen and
the welcome text are all made from this table, with the ``[keys]`` settings applied.

Plain data (no Textual import), so the settings can validate ``[keys]`` against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    id: str
    key: str
    action: str
    #: The footer's short label.
    label: str
    #: What it does, for the palette, the help screen and the welcome text.
    description: str
    #: Footer group (keys shown together, e.g. K− and K+), if any.
    group: str | None = None
    #: Where the key works: the whole chat (None), or only while the chats list has the focus.
    scope: str | None = None


KEYS: tuple[Key, ...] = (
    Key("help", "f1", "help", "Help", "all keys, as they are bound now"),
    Key("k_down", "f2", "k(-1)", "K−", "draft one fewer token per step", group="K"),
    Key("k_up", "f3", "k(1)", "K+", "draft one more token per step", group="K"),
    Key("tau_down", "f4", "tau(-1)", "τ−", "lower tau: accept more drafts (lossy below 1)", group="τ"),
    Key("tau_up", "f5", "tau(1)", "τ+", "raise tau toward 1 (lossless)", group="τ"),
    Key("mode", "f6", "toggle_mode", "Mode", "switch between speculative and target-only decoding"),
    Key("compare", "f7", "compare", "Compare", "run the last prompt again in the other mode, side by side"),
    Key("report", "ctrl+r", "report", "Report",
        "the last reply's speculation report: origins, acceptance, timing, where the draft went wrong"),
    Key("colours", "f8", "toggle_origins", "Colours", "colour reply tokens by origin (draft-accepted vs target)"),
    Key("panel", "f9", "toggle_panel", "Panel", "hide or show the side panel"),
    Key("cancel", "escape", "cancel", "Cancel", "stop the reply; what was written is kept"),
    Key("new_chat", "ctrl+n", "new_chat", "New", "start an empty conversation"),
    Key("regenerate", "ctrl+g", "regenerate", "Again",
        "write the last reply again: a new sample, or the same text when greedy"),
    Key("edit", "ctrl+b", "edit_last", "Edit", "edit your last message and send it again in place of the last exchange"),
    Key("chat_settings", "ctrl+o", "chat_settings", "Settings",
        "this chat's settings: system prompt, mode, K, tau, temperature, top-p, length (kept with the chat)"),
    Key("copy", "ctrl+y", "copy_reply", "Copy", "copy the last reply to the clipboard"),
    Key("copy_pick", "ctrl+t", "copy_pick", "Copy…", "copy any message or code block of this chat"),
    Key("export", "ctrl+s", "export", "Export", "export this chat, with each reply's metrics, to Markdown and JSON"),
    Key("chats", "ctrl+l", "toggle_chats", "Chats", "show or hide past conversations"),
    Key("search", "ctrl+f", "search", "Search", "search the messages of every chat; open the one you choose"),
    Key("rename", "r", "rename_chat", "Rename", "rename the chosen chat (in the chats list)", scope="chats"),
    Key("delete", "delete,d", "delete_chat", "Delete", "delete the chosen chat, after asking (in the chats list)",
        scope="chats"),
    Key("quit", "ctrl+q", "app.quit", "Quit", "quit"),
)
KEY_IDS: tuple[str, ...] = tuple(key.id for key in KEYS)
#: The keys the welcome text introduces, in its order.
WELCOME_KEYS = ("k_down", "k_up", "tau_down", "tau_up", "mode", "compare", "help")


def effective_keys(keymap: Mapping[str, str]) -> dict[str, str]:
    """Binding id -> the key(s) it is bound to once ``keymap`` (the ``[keys]`` settings) is applied."""
    return {key.id: keymap.get(key.id, key.key) for key in KEYS}


def check_keymap(keymap: Mapping[str, str]) -> dict[str, str]:
    """``keymap`` if every id is a binding and every value names a key, else a ValueError saying which."""
    for binding_id, keys in keymap.items():
        if binding_id not in KEY_IDS:
            raise ValueError(f"unknown key binding {binding_id!r}; known: {', '.join(KEY_IDS)}")
        if not isinstance(keys, str) or not all(part.strip() for part in keys.split(",")):
            raise ValueError(f"keys.{binding_id} must name one or more keys, such as \"f10\" or \"ctrl+k,f10\"")
    return dict(keymap)
