"""The paired lever run for a limited draft head completed where the draft doubts (this folder's
README, "A limited draft head completed where the draft doubts").

Interleaved per prompt in one process (the order rotates from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (hybrid); one engine per variant (its own
policies and verify-cost table) over the one loaded pair, whose draft's head is set before each reply:

- W: the whole head (the default);
- H<N>: the ids below N (in thousands of 1024), the special ids and the context's ids
  (``draft_head_tokens``);
- S<N>:<S>: the same, and the rest of the head for a row whose best kept id is under probability S;
- any of these with ``#`` and a tag: a second engine of the same variant (the spread between two
  identical engines says what a paired median moves by itself).

Run: git apply docs/benchmarks/2026-12-07-sure-head.patch   # the variant is not on main
     .venv/bin/python docs/benchmarks/2026-12-07-sure-head.py W W#2 S32:0.7 S32:0.7#2
Every variant is compared with the first, paired per prompt; with two engines of a variant, it also
prints per category the median over prompts of (the mean of the other variant's engines' ratios) /
(the mean of the first variant's), and the spread of the first variant's two engines.
``--combine OUTPUT`` prints those lines again from a run's output, from its ratios as printed (to
two decimals; run 1's lines were made so, the script having printed only the pairs then). Outputs of 2026-12-07 (Zen 4 EPYC), beside this file:
2026-12-07-sure-head.txt (run 1, a first build that decided on a softmax over the whole row),
-2.txt (run 2, a second build deciding on a softmax over the kept logits alone) and -3.txt (run 3,
the patch's build: the second, reading the whole head in one call while most rows come out unsure).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from paired_levers import Ratios, Reply, decoded, interleaved, lean_forward, print_paired, read_ratios

from specdec_tui.config import Settings
from specdec_tui.runtime import build_engine, load_runtime


def head_setting(name: str) -> tuple[int, float | None]:
    """The leading ids and ``sure`` of a variant's name."""
    name = name.partition("#")[0]
    if name == "W":
        return 0, None
    leading, _, sure = name[1:].partition(":")
    return int(leading) * 1024, float(sure) if name.startswith("S") else None


def print_combined(ratios: Ratios) -> None:
    """Per category: the median over prompts of the mean of the other variant's engines' ratios over
    the mean of the first variant's, and of the first variant's second engine over its first."""
    for category, by in ratios.items():
        first = [name for name in by if name.partition("#")[0] == VARIANTS[0]]
        other = [name for name in by if name not in first]
        prompts = range(len(by[first[0]]))
        combined = [statistics.mean(by[n][i] for n in other) / statistics.mean(by[n][i] for n in first) for i in prompts]
        line = (f"{category}: {other[0].partition('#')[0]} / {VARIANTS[0]} (means of their engines) median "
                f"{statistics.median(combined):.3f} (min {min(combined):.3f}, max {max(combined):.3f})")
        if len(first) > 1:
            spread = [by[first[1]][i] / by[first[0]][i] for i in prompts]
            line += f"; {first[1]} / {first[0]} median {statistics.median(spread):.3f}"
        print(line)


if sys.argv[1:2] == ["--combine"]:
    found: Ratios = defaultdict(lambda: defaultdict(list))
    for prompt, by in read_ratios(sys.argv[2:]).items():
        category = {"gen": "code-generation", "edit": "code-editing"}.get(prompt.split("-")[0], "prose")
        for name, ratios in by.items():
            found[category][name].extend(ratios)
    VARIANTS = [next(iter(found["code-generation"]))]
    print_combined(found)
    raise SystemExit

VARIANTS = sys.argv[1:] or ["W", "W#2", "S32:0.7", "S32:0.7#2"]
runtime = load_runtime(Settings())
draft = lean_forward(runtime.pair.draft.runner)
always = (*runtime.pair.draft.tokenizer.all_special_ids, *runtime.pair.draft.eos_ids)
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    leading, sure = head_setting(VARIANTS[0] if name == "target" else name)
    draft.limit_head(leading, always, sure)
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, ""


ratios = interleaved(runtime, VARIANTS, run)
print_paired(ratios, [(name, VARIANTS[0]) for name in VARIANTS[1:]])
print_combined(ratios)
