"""Offline: the draft model reading less of the prompt (this folder's README, "Inside a step, on the
AVX2 hosts"), so that `hybrid`'s one prompt cost of its own, the draft's prompt pass, shrinks.

Each variant hands the draft a shorter prompt: without the system message (from the user turn's
`<|im_start|>` on), or the first token (a place for attention to rest) and the prompt's last W
tokens. The draft then reads the target's own greedy reply to each suite prompt
(`2026-12-04-target-replies.json`, made by the lookup script beside this file) in one teacher-forced
pass, and each of its greedy next tokens is scored against the target's: over the whole reply, and
over the positions where `hybrid`'s prompt lookup has no copy to offer (where the model drafts).
The prompt pass is timed too, the median of three after one untimed.

Run: .venv/bin/python docs/benchmarks/2026-12-05-draft-window.py
The output of 2026-12-05 is 2026-12-05-draft-window.txt beside this file.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.engine.drafters import PromptLookupDrafter
from specdec_tui.runtime import load_runtime

REPLIES = Path(__file__).with_name("2026-12-04-target-replies.json")
Window = Callable[[list[int]], list[int]]


def last(width: int) -> Window:
    return lambda prompt: prompt[:1] + prompt[max(1, len(prompt) - width):]


def variants(turn_start: int) -> dict[str, Window]:
    def from_user_turn(prompt: list[int]) -> list[int]:
        return prompt[[i for i, t in enumerate(prompt) if t == turn_start][1]:]

    return {"whole prompt": lambda prompt: prompt, "no system message": from_user_turn,
            **{f"first + last {w}": last(w) for w in (96, 64, 48, 32)}}


def prompt_seconds(draft: CachedModel, prompt: list[int]) -> float:
    times = []
    for _ in range(4):
        draft.reset()
        start = time.perf_counter()
        draft.logits_for(prompt, 1)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def agreement(draft: CachedModel, prompt: list[int], reply: list[int]) -> list[bool]:
    """Whether the draft's greedy token after each prefix of ``reply`` is the target's next one."""
    draft.reset()
    logits = draft.logits_for(prompt + reply[:-1], len(reply))
    return [int(p) == t for p, t in zip(logits.argmax(-1).tolist(), reply, strict=True)]


def main() -> None:
    replies = json.loads(REPLIES.read_text())
    runtime = load_runtime(Settings())
    draft = CachedModel(runtime.pair.draft.runner)
    span = runtime.params().lookup_k  # the longest copy `hybrid` proposes
    lookup = PromptLookupDrafter(min_ngram=3, span=span)
    turn_start = runtime.pair.target.tokenizer.convert_tokens_to_ids("<|im_start|>")
    windows = variants(turn_start)
    totals: dict[str, dict[tuple[str, str], list]] = defaultdict(lambda: defaultdict(list))
    for item in replies:
        prompt, reply = item["prompt"], item["reply"]
        uncopied = [not lookup.continuation(prompt + reply[:i], span) for i in range(len(reply))]
        line = [f"{item['id']}: {len(prompt)} prompt tokens"]
        for name, window in windows.items():
            read = window(prompt)
            agreed = agreement(draft, read, reply)
            seconds = prompt_seconds(draft, read)
            by = totals[item["category"]]
            by[name, "all"] += agreed
            by[name, "uncopied"] += [a for a, u in zip(agreed, uncopied, strict=True) if u]
            by[name, "tokens"].append(len(read))
            by[name, "seconds"].append(seconds)
            line.append(f"{name} {len(read)} read, {statistics.fmean(agreed):.3f} agreed, {seconds * 1000:.0f} ms")
        print(" | ".join(line), flush=True)
    for category, by in totals.items():
        print(f"\n{category}: variant, prompt tokens the draft reads (median), its prompt pass (median), "
              "draft tokens equal to the target's over the whole replies / where no copy is offered")
        for name in windows:
            print(f"  {name}: {statistics.median(by[name, 'tokens'])} tokens, "
                  f"{statistics.median(by[name, 'seconds']) * 1000:.0f} ms, "
                  f"{statistics.fmean(by[name, 'all']):.3f} / {statistics.fmean(by[name, 'uncopied']):.3f} "
                  f"({len(by[name, 'uncopied'])} positions)")


if __name__ == "__main__":
    main()
