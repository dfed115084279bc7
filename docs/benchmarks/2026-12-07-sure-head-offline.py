"""Offline, before a paired run: the draft's limited head completed where it doubts (this folder's
README, "A limited draft head completed where the draft doubts").

``draft_head_tokens = N`` computes the logits of the ids below N, the special ids and the context's
ids; the draft then cannot propose any other id, and the paired runs of 2026-12-03 and 2026-12-05
lost in prose what the cheaper steps gained. ``ContextHead(sure=S)`` computes the rest of the head
for a row whose best kept id has a probability under S among the kept ids. What that keeps of the
whole head's proposals: the draft's logits at every position of the target's greedy replies to the
suite (``2026-12-04-target-replies.json``, one teacher-forced pass a reply, whole head), and for each
N and S, per category:

- completed: the share of positions whose row would read the rest of the head;
- changed: the share whose proposal (the best id after completing, or not) differs from the whole
  head's;
- kept: how often that proposal is the target's token, against the whole head's.

Then a draft step after 200 tokens, timed with the whole head, with the leading 32768 ids and the
context's (never completed, ``sure`` 0) and with every row completed (``sure`` above 1), in turn, each
after streaming 512 MB as a target pass does between draft steps, 25 rounds.

Run: git apply docs/benchmarks/2026-12-07-sure-head.patch   # the variant is not on main
     .venv/bin/python docs/benchmarks/2026-12-07-sure-head-offline.py
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-sure-head-offline.txt beside this file, made with the
second build of the three the paired runs tried (the patch holds the third, whose switch to the whole
head a head made anew for each timed step never reaches, so the steps timed are the same).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.models.quantized_kernels import INT4_COLUMNS
from specdec_tui.runtime import load_runtime

REPLIES = Path(__file__).with_name("2026-12-04-target-replies.json")
LEADING = (32768, 65536)
SURE = (0.3, 0.5, 0.7, 0.9)
ROUNDS = 25

runtime = load_runtime(Settings())
runner = lean_forward(runtime.pair.draft.runner)
always = {*runtime.pair.draft.tokenizer.all_special_ids, *runtime.pair.draft.eos_ids}
vocab = runner.vocab


def kept_blocks(ids: set[int], leading: int) -> list[int]:
    """The ids a limited head computes past the leading ones: every id of each kept id's block."""
    blocks = {t // INT4_COLUMNS for t in ids if leading <= t < vocab}
    return sorted(c for b in blocks for c in range(b * INT4_COLUMNS, min((b + 1) * INT4_COLUMNS, vocab)))


counts: dict[tuple[str, int, float], list[int]] = defaultdict(lambda: [0, 0, 0])
whole_kept: dict[str, int] = defaultdict(int)
positions: dict[str, int] = defaultdict(int)
for item in json.loads(REPLIES.read_text()):
    runner.limit_head(0)
    runner.reset()
    prompt, reply, category = item["prompt"], item["reply"], item["category"]
    logits = runner.forward(prompt + reply[:-1], len(reply))
    whole_best = logits.argmax(-1)
    for t, target in enumerate(reply):
        positions[category] += 1
        whole_kept[category] += int(whole_best[t]) == target
        for leading in LEADING:
            extra = kept_blocks(always | set(prompt) | set(reply[:t]), leading)
            row = torch.cat([logits[t, :leading], logits[t, extra]])
            ids = torch.cat([torch.arange(leading), torch.tensor(extra, dtype=torch.long)])
            probabilities = torch.softmax(row, -1)
            best = int(ids[probabilities.argmax()])
            top = float(probabilities.max())
            for sure in (0.0, *SURE):
                completed = top < sure
                proposal = int(whole_best[t]) if completed else best
                tally = counts[(category, leading, sure)]
                tally[0] += completed
                tally[1] += proposal != int(whole_best[t])
                tally[2] += proposal == target

for category, total in positions.items():
    print(f"{category}: {total} positions; the whole head's proposal is the target's token at {whole_kept[category] / total:.3f}")
    for leading in LEADING:
        for sure in (0.0, *SURE):
            completed, changed, kept = counts[(category, leading, sure)]
            print(f"  leading {leading}, sure {sure:.1f}: completed {completed / total:.3f}, "
                  f"changed {changed / total:.4f}, kept {kept / total:.3f}", flush=True)


def step_ms(setting: tuple[int, float | None], other: torch.Tensor) -> float:
    leading, sure = setting
    runner.limit_head(leading, always, sure)
    runner.reset()
    runner.forward(list(range(1000, 1200)), 1)
    other.add_(1.0)  # streamed as a target pass streams its weights
    start = time.perf_counter()
    runner.forward([300], 1)
    return (time.perf_counter() - start) * 1000


settings = {"whole head": (0, None), "leading 32768, never completed": (32768, 0.0),
            "leading 32768, every row completed": (32768, 1.1)}
other = torch.ones(128 * 1024 * 1024)
times: dict[str, list[float]] = defaultdict(list)
for round_ in range(ROUNDS):
    names = list(settings) if round_ % 2 == 0 else list(reversed(settings))
    for name in names:
        times[name].append(step_ms(settings[name], other))
for name, values in times.items():
    print(f"a draft step after 200 tokens, {name}: median {statistics.median(values[1:]):.2f} ms "
          f"(quartiles {statistics.quantiles(values[1:], n=4)[0]:.2f}-{statistics.quantiles(values[1:], n=4)[2]:.2f})")
