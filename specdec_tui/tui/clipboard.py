"""Copying a reply: OSC 52 to the terminal, and the system clipboard tool when there is one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import platformdirs

TOOLS = (("wl-copy",), ("xclip", "-selection", "clipboard"), ("xsel", "--clipboard", "--input"), ("pbcopy",))


def copy_with_system_tool(text: str) -> str | None:
    """Name of the clipboard tool that took ``text``, or None if none is installed or it failed."""
    for command in TOOLS:
        if shutil.which(command[0]):
            try:
                subprocess.run(command, input=text.encode(), check=True, timeout=3, capture_output=True)
            except (OSError, subprocess.SubprocessError):
                continue
            return command[0]
    return None


def save_copy(text: str) -> Path:
    """Last resort: the reply in a file the user can open."""
    path = Path(platformdirs.user_data_dir("specdec-tui")) / "last-reply.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
