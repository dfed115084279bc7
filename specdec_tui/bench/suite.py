"""Prompt suites: JSONL, one chat per line with an id, a category and messages."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

ROLES = {"system", "user", "assistant"}


class SuiteError(ValueError):
    """A suite file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    messages: tuple[dict[str, str], ...]


def default_suite_path() -> Path:
    return Path(str(resources.files("specdec_tui.bench") / "suites" / "default.jsonl"))


def load_suite(path: Path) -> list[BenchPrompt]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise SuiteError(f"cannot read prompt file {path}: {exc.strerror}") from exc
    prompts, seen = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
            prompt = BenchPrompt(
                id=str(record["id"]),
                category=str(record["category"]),
                messages=tuple({"role": m["role"], "content": m["content"]} for m in record["messages"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SuiteError(f"{where}: expected {{\"id\", \"category\", \"messages\": [{{\"role\", "
                             f"\"content\"}}]}} ({exc})") from exc
        if not prompt.messages or any(m["role"] not in ROLES for m in prompt.messages):
            raise SuiteError(f"{where}: messages must be non-empty with roles from {sorted(ROLES)}")
        if prompt.id in seen:
            raise SuiteError(f"{where}: duplicate prompt id {prompt.id!r}")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise SuiteError(f"{path} holds no prompts")
    return prompts


def select_prompts(
    prompts: list[BenchPrompt], categories: list[str] | None = None, limit: int | None = None
) -> list[BenchPrompt]:
    """The prompts of ``categories`` (all if None), at most ``limit`` of each, in suite order."""
    counts: Counter[str] = Counter()
    kept = []
    for prompt in prompts:
        if categories and prompt.category not in categories:
            continue
        if limit is not None and counts[prompt.category] >= limit:
            continue
        counts[prompt.category] += 1
        kept.append(prompt)
    return kept
