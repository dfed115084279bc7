"""A prompt's pass with the last layer carrying on only the rows whose logits are asked for, against
the same pass carrying on every row (this folder's README, "Inside a step, on the AVX2 hosts").

A prompt longer than the one-call kernel's rows runs the layers' modules; its pass asks for one
row's logits, so no later layer reads the other rows after the last layer's attention (their keys
and values are in the cache by then), and the last layer's output projection and MLP skip them.
Each model's prompt pass over two code-editing prompts (the prompt less its last token, as the
decoder feeds it) is timed both ways in turn, 13 rounds, the first left out; the logits are
checked equal.

Run: .venv/bin/python docs/benchmarks/2026-12-05-last-layer-rows.py
The output of 2026-12-05 is 2026-12-05-last-layer-rows.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch
from paired_levers import lean_forward

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.runtime import load_runtime

ROUNDS = 13


def timed_pass(runner: FastLlama, prompt: list[int]) -> tuple[float, torch.Tensor]:
    runner.reset()
    start = time.perf_counter()
    logits = runner.forward(prompt, 1)
    return time.perf_counter() - start, logits


def main() -> None:
    runtime = load_runtime(Settings())
    items = {item.id: item for item in load_suite(default_suite_path())}
    for prompt_id in ("edit-rename", "edit-js-const"):
        prompt = runtime.prompt_ids(items[prompt_id].messages)[:-1]
        for role in ("target", "draft"):
            runner = lean_forward(getattr(runtime.pair, role).runner)
            trimmed = runner.stack

            def every_row(*args: object, stack: torch.nn.Module = trimmed) -> torch.Tensor:
                return stack(*args[:6], 0)  # the stack's arguments, with no rows left out

            times: dict[str, list[float]] = {"trimmed": [], "every row": []}
            for round_ in range(ROUNDS):
                order = [("trimmed", trimmed), ("every row", every_row)]
                logits = {}
                for name, stack in order if round_ % 2 else order[::-1]:
                    runner.stack = stack
                    seconds, logits[name] = timed_pass(runner, prompt)
                    times[name].append(seconds)
                assert torch.equal(logits["trimmed"], logits["every row"])
            runner.stack = trimmed
            kept, every = times["trimmed"][1:], times["every row"][1:]
            paired = statistics.median(a / b for a, b in zip(kept, every, strict=True))
            print(f"{prompt_id} ({len(prompt)} rows), {role}: trimmed {statistics.median(kept) * 1000:.1f} ms, "
                  f"every row {statistics.median(every) * 1000:.1f} ms (medians), paired ratio {paired:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
