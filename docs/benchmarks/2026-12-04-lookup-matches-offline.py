"""Offline, before the paired run: what matching up to 8 tokens back instead of 4 changes in the
copies `hybrid`'s prompt lookup proposes (this folder's README, "Longer lookup matches, paired").

The target's greedy replies to every suite prompt (target-only, 128 new tokens) are decoded once and
kept in a JSON file beside the output; then, at every position of every reply, the lookup (3-gram
minimum, as in `hybrid`) proposes up to 8 tokens from the context so far, and each copy is scored
against what the target really wrote next: how many of its tokens would have been kept, and how
often none. A walk through each reply, taking each copy's kept tokens and the target's own one,
counts the steps the copies take.

Run: .venv/bin/python docs/benchmarks/2026-12-04-lookup-matches-offline.py
The output of 2026-12-04 is 2026-12-04-lookup-matches-offline.txt beside this file.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from specdec_tui.engine.cached_model import common_prefix_length
from specdec_tui.engine.drafters import PromptLookupDrafter

REPLIES = Path(__file__).with_name("2026-12-04-target-replies.json")
SPAN = 8


def target_replies() -> list[dict]:
    if REPLIES.exists():
        return json.loads(REPLIES.read_text())
    from specdec_tui.bench.suite import default_suite_path, load_suite
    from specdec_tui.config import Settings
    from specdec_tui.engine.decoder import FinishedEvent
    from specdec_tui.runtime import load_runtime

    runtime = load_runtime(Settings())
    replies = []
    for item in load_suite(default_suite_path()):
        ids = runtime.prompt_ids(item.messages)
        for event in runtime.generate(ids, runtime.params(max_new_tokens=128), "target", fresh=True):
            if isinstance(event, FinishedEvent):
                replies.append({"id": item.id, "category": item.category, "prompt": list(ids),
                                "reply": list(event.token_ids)})
    REPLIES.write_text(json.dumps(replies))
    return replies


def score(replies: list[dict], lookup: PromptLookupDrafter) -> tuple[int, float, float, int]:
    """Copies proposed, their mean kept tokens, the share kept not at all, and a walk's copy steps."""
    kept_counts, steps = [], 0
    for reply in replies:
        prompt, tokens = reply["prompt"], reply["reply"]
        for i in range(len(tokens)):
            copy = lookup.continuation(prompt + tokens[:i], SPAN)
            if copy:
                kept_counts.append(common_prefix_length(copy, tokens[i:]))
        i = 0
        while i < len(tokens):
            copy = lookup.continuation(prompt + tokens[:i], SPAN)
            i += common_prefix_length(copy, tokens[i:]) + 1
            steps += bool(copy)
    zero = sum(k == 0 for k in kept_counts) / max(len(kept_counts), 1)
    return len(kept_counts), statistics.fmean(kept_counts) if kept_counts else 0.0, zero, steps


def main() -> None:
    replies = target_replies()
    for category in sorted({r["category"] for r in replies}):
        chosen = [r for r in replies if r["category"] == category]
        for longest in (4, 8):
            copies, mean, zero, steps = score(chosen, PromptLookupDrafter(max_ngram=longest, min_ngram=3))
            print(f"{category}, matches of 3 to {longest} tokens: {copies} copies, {mean:.2f} tokens kept "
                  f"on average, {zero:.0%} kept none; a walk through the replies takes {steps} copy steps")


if __name__ == "__main__":
    main()
