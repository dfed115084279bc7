"""A long prompt read in chunks of at most the one-call kernel's 64 rows, against one pass through the
layers' modules (this folder's README, "Inside a step, on the AVX2 hosts").

A prompt of up to 64 rows is one call of the package's kernel for all layers; a longer one runs the
layers' modules, a call per product. Read in even chunks of at most 64 rows, a code-editing prompt
would take the one-call kernel too, each chunk attending to the cache the ones before it wrote.
Each model reads two code-editing prompts (less their last token, as the decoder feeds them) both
ways in turn, 9 rounds, the first left out. The chunked pass is not the same arithmetic (the
kernel's products and attention against the modules'), so its logits differ a little; the script
prints the largest difference and both argmaxes.

Run: .venv/bin/python docs/benchmarks/2026-12-05-prompt-chunks.py
The output of 2026-12-05 is 2026-12-05-prompt-chunks.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch
from paired_levers import lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.attention import MAX_ROWS
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.runtime import load_runtime

ROUNDS = 9


def one_pass(runner: FastLlama, prompt: list[int]) -> torch.Tensor:
    return runner.forward(prompt, 1)


def chunked(runner: FastLlama, prompt: list[int]) -> torch.Tensor:
    chunks = -(-len(prompt) // MAX_ROWS)
    size = -(-len(prompt) // chunks)
    for start in range(0, len(prompt) - size, size):
        runner.forward(prompt[start : start + size], 1)
    return runner.forward(prompt[(chunks - 1) * size :], 1)


def main() -> None:
    runtime = load_runtime(Settings())
    items = {item.id: item for item in load_suite(default_suite_path())}
    ways = {"one pass": one_pass, "chunked": chunked}
    for prompt_id in ("edit-rename", "edit-js-const"):
        prompt = runtime.prompt_ids(items[prompt_id].messages)[:-1]
        for role in ("target", "draft"):
            runner = lean_forward(getattr(runtime.pair, role).runner)
            times: dict[str, list[float]] = {name: [] for name in ways}
            logits: dict[str, torch.Tensor] = {}
            for round_ in range(ROUNDS):
                order = list(ways.items())
                for name, way in order if round_ % 2 else order[::-1]:
                    runner.reset()
                    start = time.perf_counter()
                    logits[name] = way(runner, prompt)
                    times[name].append(time.perf_counter() - start)
            whole, parts = times["one pass"][1:], times["chunked"][1:]
            paired = statistics.median(b / a for a, b in zip(whole, parts, strict=True))
            difference = (logits["one pass"] - logits["chunked"]).abs().max().item()
            print(f"{prompt_id} ({len(prompt)} rows), {role}: one pass {statistics.median(whole) * 1000:.0f} ms, "
                  f"chunked {statistics.median(parts) * 1000:.0f} ms (medians), paired chunked / one pass "
                  f"{paired:.3f}; logits differ by up to {difference:.2f}, argmax "
                  f"{int(logits['one pass'].argmax())} / {int(logits['chunked'].argmax())}", flush=True)


if __name__ == "__main__":
    main()
