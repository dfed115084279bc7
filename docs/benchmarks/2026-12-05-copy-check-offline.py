"""Offline, before the paired run: how well the draft model tells a good copy from a bad one (this
folder's README, "Copies checked by the draft model, paired (not kept)").

At every position of the target's greedy reply to every suite prompt (`2026-12-04-target-replies.json`)
where `hybrid`'s strict lookup offers a copy (3- and 4-gram matches, up to `lookup_k` tokens), the
copy's first token is set beside the draft model's greedy token there (one teacher-forced pass of
the draft over prompt and reply) and both beside the target's. Then the copy cut where the draft
model's token parts from it: how many of its rows the target keeps, against the whole copy's.

Run: .venv/bin/python docs/benchmarks/2026-12-05-copy-check-offline.py
The output of 2026-12-05 is 2026-12-05-copy-check-offline.txt beside this file.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from paired_levers import draft_guesses

from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import CachedModel, common_prefix_length
from specdec_tui.engine.drafters import PromptLookupDrafter
from specdec_tui.runtime import load_runtime

REPLIES = Path(__file__).with_name("2026-12-04-target-replies.json")


def main() -> None:
    runtime = load_runtime(Settings())
    draft = CachedModel(runtime.pair.draft.runner)
    span = runtime.params().lookup_k
    lookup = PromptLookupDrafter(min_ngram=3, span=span)
    counts: dict[str, Counter[str]] = {}
    for item in json.loads(REPLIES.read_text()):
        prompt, reply = item["prompt"], item["reply"]
        guesses, _ = draft_guesses(draft, prompt, reply)
        count = counts.setdefault(item["category"], Counter())
        for i in range(len(reply)):
            copy = lookup.continuation(prompt + reply[:i], span)
            if not copy:
                continue
            same = "agree" if copy[0] == guesses[i] else "part"
            count["copies"] += 1
            count[same] += 1
            count[f"{same}: copy right"] += copy[0] == reply[i]
            count[f"{same}: draft right"] += guesses[i] == reply[i]
            kept = common_prefix_length(copy, reply[i:])
            # The draft's guesses along the copy are its own only while the copy so far is the reply.
            cut = 0
            while cut < len(copy) and cut <= kept and i + cut < len(reply) and guesses[i + cut] == copy[cut]:
                cut += 1
            count["rows"] += len(copy)
            count["kept"] += kept
            count["cut rows"] += cut
            count["cut kept"] += min(kept, cut)
    for category, count in sorted(counts.items()):
        print(f"{category}: {count['copies']} copy positions; the draft model's token and the copy's first agree "
              f"at {count['agree']} (the copy right at {count['agree: copy right']}), part at {count['part']} "
              f"(the copy right at {count['part: copy right']}, the draft model at {count['part: draft right']}); "
              f"whole copies keep {count['kept']} of {count['rows']} rows, copies cut where the draft model "
              f"parts keep {count['cut kept']} of {count['cut rows']}")


if __name__ == "__main__":
    main()
