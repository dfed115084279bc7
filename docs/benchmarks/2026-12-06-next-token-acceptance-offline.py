"""Does the draft's confidence in the token it just drafted say whether the target keeps the next one?

``DraftPolicy.keep_drafting`` drafts one more token while the chance that the chain so far and the
next token are kept pays for the next token's seconds; the chain's chance comes from the drafted
tokens' confidences, the next token's from the drafter's average acceptance, because its confidence
is not known before it is drafted. If a doubted token is followed by doubted ones (and a sure one by
sure ones), the confidence just seen would predict the next token's acceptance better than the
average does, and the policy could stop sooner after a doubt and go on longer after a sure token.

Offline, on the draft's greedy token and probability after every prefix of the target's greedy
replies (one teacher-forced pass of the draft per reply; a drafted token is kept when it is the
target's next token), per category: the rate at which the next token is kept, overall and by the
confidence of the token before it, and how much better (in log loss, each prompt's rates fitted on
the other prompts) a next-token rate by the previous confidence predicts than the average rate.

Run: .venv/bin/python docs/benchmarks/2026-12-06-next-token-acceptance-offline.py REPLIES.jsonl [PROMPTS.jsonl]
(REPLIES.jsonl: a bench run's kept replies, whose target-only ones are read.)
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from paired_levers import draft_top

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.runtime import load_runtime

BINS = (0.0, 0.4, 0.6, 0.8, 0.9, 0.97, 1.01)


def confidence_bin(confidence: float) -> int:
    return next(i for i in range(len(BINS) - 1) if confidence < BINS[i + 1])


def log_loss(p: float, kept: bool) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return -math.log(p if kept else 1 - p)


def main() -> None:
    replies_path = Path(sys.argv[1])
    prompts_path = Path(sys.argv[2]) if len(sys.argv) > 2 else default_suite_path()
    replies = {record["prompt_id"]: record["token_ids"]
               for record in map(json.loads, replies_path.read_text().splitlines()) if record["mode"] == "target"}
    runtime = load_runtime(Settings())
    draft = CachedModel(runtime.pair.draft.runner)
    # per prompt: (category, [(previous confidence, this confidence, kept)])
    positions: dict[str, tuple[str, list[tuple[float, float, bool]]]] = {}
    for item in load_suite(prompts_path):
        reply = replies.get(item.id)
        if not reply or len(reply) < 3:
            continue
        prompt = list(runtime.prompt_ids(item.messages))
        guess, confidence = (column[:, 0].tolist() for column in draft_top(draft, prompt, reply, 1))
        kept = [g == token for g, token in zip(guess, reply, strict=True)]
        positions[item.id] = (item.category, [(confidence[i - 1], confidence[i], kept[i]) for i in range(1, len(reply))])

    by_category: dict[str, list[str]] = defaultdict(list)
    for prompt_id, (category, _) in positions.items():
        by_category[category].append(prompt_id)
    for category, prompt_ids in sorted(by_category.items()):
        rows = [row for pid in prompt_ids for row in positions[pid][1]]
        print(f"== {category}: {len(prompt_ids)} replies, {len(rows)} positions, "
              f"the draft's token kept at {sum(r[2] for r in rows) / len(rows):.3f} of them")
        print("| previous token's confidence | positions | next token kept | this token's mean confidence |")
        print("|---|---|---|---|")
        for b in range(len(BINS) - 1):
            in_bin = [r for r in rows if confidence_bin(r[0]) == b]
            if in_bin:
                print(f"| {BINS[b]:.2f}-{min(BINS[b + 1], 1):.2f} | {len(in_bin)} | "
                      f"{sum(r[2] for r in in_bin) / len(in_bin):.3f} | {sum(r[1] for r in in_bin) / len(in_bin):.3f} |")
        # Each prompt's positions predicted from the category's other prompts.
        flat, by_previous = 0.0, 0.0
        for pid in prompt_ids:
            others = [r for other in prompt_ids if other != pid for r in positions[other][1]]
            average = sum(r[2] for r in others) / len(others)
            rate = {}
            for b in range(len(BINS) - 1):
                in_bin = [r[2] for r in others if confidence_bin(r[0]) == b]
                rate[b] = (sum(in_bin) + 2 * average) / (len(in_bin) + 2)
            for previous, _, kept in positions[pid][1]:
                flat += log_loss(average, kept)
                by_previous += log_loss(rate[confidence_bin(previous)], kept)
        print(f"log loss per position, held out by prompt: the average rate {flat / len(rows):.4f}, "
              f"by the previous token's confidence {by_previous / len(rows):.4f} "
              f"({by_previous / flat:.3f} of the average's)\n")


if __name__ == "__main__":
    main()
