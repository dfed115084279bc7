"""Offline, before any build: what a lookup proposing several matches at once could keep (this
folder's README, "Several lookup matches, offline (not built)").

`hybrid`'s strict lookup copies what followed the latest earlier occurrence of the context's last 4
tokens (else 3). Where those tokens occurred more than once, the other occurrences' continuations
could go into the same verify pass as branches. At every position of the target's greedy reply to
every suite prompt (`2026-12-04-target-replies.json`), this sets the latest match's copy (up to
`lookup_k` = 8 tokens) beside the best of all the matches' copies, scored against what the target
wrote next, as an oracle choosing among them would; then a walk through each reply, taking each
copy's kept tokens and the target's own one, counts the copy steps either way and the tokens the
other matches add.

Run: .venv/bin/python docs/benchmarks/2026-12-05-several-matches-offline.py
The output of 2026-12-05 is 2026-12-05-several-matches-offline.txt beside this file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from specdec_tui.engine.cached_model import common_prefix_length
from specdec_tui.engine.drafters import PromptLookupDrafter

REPLIES = Path(__file__).with_name("2026-12-04-target-replies.json")
SPAN = 8


def every_continuation(context: Sequence[int], span: int) -> list[list[int]]:
    """The distinct copies after every earlier occurrence of the context's last 4 tokens (else 3)."""
    for ngram in (4, 3):
        if len(context) <= ngram:
            continue
        tail = list(context[-ngram:])
        copies = []
        for start in range(len(context) - ngram):
            copy = list(context[start + ngram : start + ngram + span])
            if list(context[start : start + ngram]) == tail and copy not in copies:
                copies.append(copy)
        if copies:
            return copies
    return []


def walk(prompt: list[int], reply: list[int], kept: Callable[[list[int], int], int]) -> tuple[int, int]:
    """Copy steps and the tokens they keep, walking ``reply`` with ``kept`` tokens of a copy at each."""
    i, steps, tokens = 0, 0, 0
    while i < len(reply):
        copied = kept(prompt + reply[:i], i)
        if copied >= 0:
            steps += 1
            tokens += copied
        i += max(copied, 0) + 1
    return steps, tokens


def main() -> None:
    lookup = PromptLookupDrafter(min_ngram=3, span=SPAN)
    counts: dict[str, Counter[str]] = {}
    for item in json.loads(REPLIES.read_text()):
        prompt, reply = item["prompt"], item["reply"]
        count = counts.setdefault(item["category"], Counter())

        def latest(context: list[int], i: int, reply: list[int] = reply) -> int:
            copy = lookup.continuation(context, SPAN)
            return common_prefix_length(copy, reply[i:]) if copy else -1

        def best(context: list[int], i: int, reply: list[int] = reply) -> int:
            copies = every_continuation(context, SPAN)
            return max((common_prefix_length(copy, reply[i:]) for copy in copies), default=-1)

        for i in range(len(reply)):
            copies = every_continuation(prompt + reply[:i], SPAN)
            if copies:
                count["positions"] += 1
                count["several"] += len(copies) > 1
        for name, kept in (("latest", latest), ("best", best)):
            steps, tokens = walk(prompt, reply, kept)
            count[f"{name} steps"] += steps
            count[f"{name} tokens"] += tokens
    for category, count in sorted(counts.items()):
        print(f"{category}: {count['positions']} copy positions, {count['several']} with more than one distinct "
              f"copy; a walk through the replies takes {count['latest steps']} copy steps keeping "
              f"{count['latest tokens']} tokens with the latest match, {count['best steps']} keeping "
              f"{count['best tokens']} with the best of every match")


if __name__ == "__main__":
    main()
