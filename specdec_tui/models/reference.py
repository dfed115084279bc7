"""What a model reference names: a preset, a local folder, a .gguf file or a Hugging Face id."""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specdec_tui.models.errors import ModelError
from specdec_tui.models.presets import PRESETS

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class ModelRef:
    kind: Literal["preset", "folder", "gguf", "hub"]
    value: str  # preset name, absolute path or hub id

    @property
    def cache_key(self) -> str:
        """Name of this model's folder in the cache (a preset's GGUF; the prefix of its packed entries)."""
        if self.kind == "preset":
            return self.value
        path = Path(self.value)
        stat = path.stat()
        fingerprint = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
        return f"gguf-{path.stem}-{fingerprint[:12]}"


def parse_ref(text: str) -> ModelRef:
    """Classify ``text`` without loading anything; a path that does not exist is an error here."""
    text = text.strip()
    if not text:
        raise ModelError("a model reference is empty; name a preset, a folder, a .gguf file or a hub id")
    if text in PRESETS:
        return ModelRef("preset", text)
    path = Path(text).expanduser()
    if text.lower().endswith(".gguf"):
        if not path.is_file():
            raise ModelError(f"GGUF file {text} does not exist")
        return ModelRef("gguf", str(path.resolve()))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"folder {text} has no config.json; it is not a transformers model folder")
        return ModelRef("folder", str(path.resolve()))
    if path.exists():
        raise ModelError(f"{text} is a file but not a .gguf file; name a model folder or a .gguf file")
    looks_like_path = text.startswith(("/", ".", "~")) or text.count("/") > 1
    if looks_like_path or not HUB_ID.match(text):
        raise ModelError(f"model path {text} does not exist")
    close = difflib.get_close_matches(text, PRESETS, n=1, cutoff=0.8)
    if close:
        raise ModelError(f"unknown model {text}; did you mean the preset {close[0]}?")
    return ModelRef("hub", text)
