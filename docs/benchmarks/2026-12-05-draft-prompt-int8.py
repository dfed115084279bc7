"""The draft's prompt pass on an int8 copy of the draft, against the int4 draft it drafts with
(this folder's README, "Inside a step, on the AVX2 hosts").

The draft's prompt pass is the one prompt cost only `hybrid` pays, and on AVX2 an int4 pass over
many rows unpacks nibbles the int8 kernel does not have to. Kept, the draft would read its prompt
with int8 weights into the cache its int4 steps then read on from. Each prompt (code editing, code
generation, prose) is read by both drafts in turn, 9 rounds, the first left out.

Run: .venv/bin/python docs/benchmarks/2026-12-05-draft-prompt-int8.py
(the first run packs the int8 draft into the model cache, about two minutes)
The output of 2026-12-05 is 2026-12-05-draft-prompt-int8.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

from paired_levers import lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.runtime import load_runtime, with_draft

ROUNDS = 9
PROMPTS = ("edit-rename", "edit-js-const", "gen-lru", "prose-tea")


def timed_pass(runner: FastLlama, prompt: list[int]) -> float:
    runner.reset()
    start = time.perf_counter()
    runner.forward(prompt, 1)
    return time.perf_counter() - start


def main() -> None:
    runtime = load_runtime(Settings())
    int8 = with_draft(runtime, runtime.settings.models.draft, "int8", runtime.settings.models.draft_head_tokens)
    drafts = {"int4": lean_forward(runtime.pair.draft.runner), "int8": lean_forward(int8.pair.draft.runner)}
    items = {item.id: item for item in load_suite(default_suite_path())}
    for prompt_id in PROMPTS:
        prompt = runtime.prompt_ids(items[prompt_id].messages)[:-1]
        times: dict[str, list[float]] = {name: [] for name in drafts}
        for round_ in range(ROUNDS):
            order = list(drafts.items())
            for name, runner in order if round_ % 2 else order[::-1]:
                times[name].append(timed_pass(runner, prompt))
        int4, int8_s = times["int4"][1:], times["int8"][1:]
        paired = statistics.median(b / a for a, b in zip(int4, int8_s, strict=True))
        print(f"{prompt_id} ({len(prompt)} rows): int4 {statistics.median(int4) * 1000:.0f} ms, "
              f"int8 {statistics.median(int8_s) * 1000:.0f} ms (medians), paired int8 / int4 {paired:.3f}", flush=True)


if __name__ == "__main__":
    main()
