"""A chat's first start after the models are fetched: the default pair's two GGUF files packed into a
fresh cache, timed, with the process's peak resident memory and its resident memory at each stage of
the loader's progress. This folder's README, "Packing straight from the GGUF file".

Fetches both presets into the fresh cache first (copied from the user's cache where it still holds
them, else downloaded and verified), then times `load_pair` with the default settings.

Run: .venv/bin/python docs/benchmarks/2026-12-06-first-start.py /tmp/first-start-cache
Output of 2026-12-06 (Zen 4 EPYC, 2 cores): 2026-12-06-first-start.txt (main at aa23a91, through
transformers' float model, then this change, straight from the file)
"""

from __future__ import annotations

import resource
import shutil
import sys
import time
from pathlib import Path

from specdec_tui.config import Settings
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.loader import local_source
from specdec_tui.models.progress import Progress
from specdec_tui.models.reference import parse_ref
from specdec_tui.runtime import load_pair_for

cache_dir = Path(sys.argv[1])
shutil.rmtree(cache_dir, ignore_errors=True)
settings = Settings()
for name in (settings.models.target, settings.models.draft):
    kept = ModelCache(settings.models.cache_dir).path(name)
    if (kept / "model.gguf").exists():
        shutil.copytree(kept, ModelCache(cache_dir).path(name))
    else:
        local_source(parse_ref(name), ModelCache(cache_dir), lambda event: None)
settings.models.cache_dir = cache_dir


def resident_gb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 1e9


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


last_stage: list[tuple[str, str, str]] = []


def progress(event: Progress) -> None:
    stage = (event.model, event.stage, event.detail)
    if not last_stage or last_stage[-1] != stage:
        last_stage.append(stage)
        print(f"{time.perf_counter() - start:6.1f} s  resident {resident_gb():.2f} GB  peak {peak_gb():.2f} GB  "
              f"| {event.model}: {event.stage}, {event.detail}", flush=True)


start = time.perf_counter()
load_pair_for(settings, progress)
print(f"first start: {time.perf_counter() - start:.1f} s, peak resident {peak_gb():.2f} GB")
