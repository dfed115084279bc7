"""The model cache: one folder per entry (a preset's GGUF, a packed model), trusted only when its manifest checks out.

A folder is built under a temporary name, its manifest (sizes and hashes of every file) is written
last, and only then is it renamed into place, so a killed fetch or packing never leaves a folder that is
later trusted. A folder whose files no longer match the manifest is reported corrupt.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec_tui.models.errors import ModelError

MANIFEST = "specdec-manifest.json"
FORMAT = 2  # 2: presets keep their GGUF; loads read packed entries
SAMPLE_BYTES = 1 << 16


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sample_digest(path: Path) -> str:
    """Hash of a file's size and three small windows (start, middle, end): cheap, catches truncation."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        for offset in sorted({0, max(0, size // 2 - SAMPLE_BYTES // 2), max(0, size - SAMPLE_BYTES)}):
            f.seek(offset)
            digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    source: dict

    @property
    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())


class ModelCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser()
        self.models = self.root / "models"
        self.downloads = self.root / "downloads"

    def path(self, key: str) -> Path:
        return self.models / key

    def check(self, key: str, full: bool = False) -> str | None:
        """None if ``key`` is cached intact, else why not. ``full`` hashes every byte."""
        folder = self.path(key)
        if not folder.is_dir():
            return "not cached"
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
            files = manifest["files"]
            if manifest.get("format") != FORMAT:
                return "cache format changed"
        except (OSError, ValueError, KeyError, TypeError):
            return "manifest missing or unreadable"
        for name, meta in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != meta["bytes"]:
                return f"{name} has {path.stat().st_size} bytes, expected {meta['bytes']}"
            if sample_digest(path) != meta["sample"]:
                return f"{name} does not match its recorded contents"
            if full and sha256_file(path) != meta["sha256"]:
                return f"{name} does not match its sha256"
        return None

    def entry(self, key: str) -> CacheEntry:
        manifest = json.loads((self.path(key) / MANIFEST).read_text())
        return CacheEntry(key, self.path(key), manifest.get("source", {}))

    def digest(self, key: str, names: tuple[str, ...]) -> str | None:
        """One hash of the named files of ``key`` as its manifest records them; None if one is missing."""
        files = json.loads((self.path(key) / MANIFEST).read_text())["files"]
        if not all(name in files for name in names):
            return None
        return hashlib.sha256("".join(files[name]["sha256"] for name in names).encode()).hexdigest()

    def entries(self) -> list[str]:
        if not self.models.is_dir():
            return []
        return sorted(p.name for p in self.models.iterdir() if p.is_dir() and ".partial-" not in p.name)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold an exclusive lock on ``key`` so two processes never build it at once."""
        self.models.mkdir(parents=True, exist_ok=True)
        with (self.models / f".{key}.lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def building(self, key: str, source: dict) -> Iterator[Path]:
        """A scratch folder to write ``key`` into; installed atomically if the block succeeds."""
        self.models.mkdir(parents=True, exist_ok=True)
        for stale in self.models.glob(f"{key}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        scratch = self.models / f"{key}.partial-{uuid.uuid4().hex[:8]}"
        scratch.mkdir()
        try:
            yield scratch
            write_manifest(scratch, source)
            self.remove(key)
            os.replace(scratch, self.path(key))
        except OSError as exc:
            raise ModelError(_os_error_message(exc, self.root)) from exc
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def remove(self, key: str) -> bool:
        folder = self.path(key)
        if not folder.exists():
            return False
        trash = self.models / f"{key}.partial-removed-{uuid.uuid4().hex[:8]}"
        os.replace(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True


def write_manifest(folder: Path, source: dict) -> None:
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p), "sample": sample_digest(p)}
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    tmp = folder / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"format": FORMAT, "source": source, "files": files}, indent=2))
    os.replace(tmp, folder / MANIFEST)


def _os_error_message(exc: OSError, root: Path) -> str:
    if exc.errno == errno.ENOSPC:
        return f"no space left on the disk holding {root}; free some space or set cache_dir elsewhere"
    return f"could not write the model cache in {root}: {exc.strerror or exc}"


def require_free_space(folder: Path, needed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise ModelError(
            f"not enough disk space in {folder}: {needed / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free; "
            "free some space or set cache_dir elsewhere"
        )
