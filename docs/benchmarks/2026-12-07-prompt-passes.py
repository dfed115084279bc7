"""What the prompt's passes take of a reply on this host, and how fast each model's products run over
a prompt's rows (this folder's README, "The prompt's passes on the Zen 4 (measured, not built)").

1. Each suite prompt: the target's and the draft's prompt pass from empty caches, in turn, three times
   (medians), then a `hybrid` reply and a target-only reply (128 new tokens, default settings, fresh
   caches): the draft's pass as a share of `hybrid`'s reply, and the two replies' times to the first
   token.
2. Each linear of one layer of each model over a prompt's 124 rows, seven calls (median of the last
   five): milliseconds and multiply-adds a second.

Run: .venv/bin/python docs/benchmarks/2026-12-07-prompt-passes.py
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-prompt-passes.txt beside this file.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch
from paired_levers import lean_forward, mode_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import LAYER_LINEARS, FastLlama
from specdec_tui.runtime import load_runtime

PROMPT_ROWS = 124  # the median code-editing prompt's tokens

runtime = load_runtime(Settings())
models = {"target": lean_forward(runtime.pair.target.runner), "draft": lean_forward(runtime.pair.draft.runner)}


def prompt_pass_ms(model: FastLlama, ids: list[int]) -> float:
    model.reset()
    start = time.perf_counter()
    model.forward(ids, 1)
    return (time.perf_counter() - start) * 1e3


# 1. The prompt's passes inside replies
mode_reply(runtime, runtime.prompt_ids([{"role": "user", "content": "Say hi."}]), "hybrid")
shares: dict[str, list[float]] = defaultdict(list)
for item in load_suite(default_suite_path()):
    ids = runtime.prompt_ids(item.messages)
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(3):
        for name, model in models.items():
            times[name].append(prompt_pass_ms(model, ids))
    target_ms, draft_ms = (statistics.median(times[name]) for name in ("target", "draft"))
    hybrid = mode_reply(runtime, ids, "hybrid").summary
    target_only = mode_reply(runtime, ids, "target").summary
    share = draft_ms / 1e3 / hybrid.seconds
    shares[item.category].append(share)
    print(f"{item.category:15s} {item.id:20s} prompt {len(ids):3d} tokens | prompt pass: target {target_ms:4.0f} ms, "
          f"draft {draft_ms:4.0f} ms ({share:.1%} of hybrid's reply) | hybrid {hybrid.seconds:.2f} s "
          f"({hybrid.new_tokens} tokens, first after {hybrid.ttft_s:.2f} s) | target-only {target_only.seconds:.2f} s "
          f"(first after {target_only.ttft_s:.2f} s) | {hybrid.tokens_per_s / target_only.tokens_per_s:.2f}x",
          flush=True)
for category, values in shares.items():
    print(f"{category}: the draft's prompt pass, median share of hybrid's reply {statistics.median(values):.1%} "
          f"(lowest {min(values):.1%}, highest {max(values):.1%})")

# 2. The products over a prompt's rows
for name, model in models.items():
    layer = model.layers[3]
    layer_ms = 0.0
    for linear_name in LAYER_LINEARS:
        linear = getattr(layer, linear_name)
        x = torch.randn(PROMPT_ROWS, linear.in_features)
        calls = []
        for _ in range(7):
            start = time.perf_counter()
            linear(x)
            calls.append(time.perf_counter() - start)
        ms = statistics.median(calls[2:]) * 1e3
        layer_ms += ms
        gmac = PROMPT_ROWS * linear.in_features * linear.out_features / 1e9
        print(f"{name} {linear_name:8s} ({type(linear).__name__}, {linear.in_features} x {linear.out_features}), "
              f"{PROMPT_ROWS} rows: {ms:5.2f} ms, {gmac / ms * 1e3:4.0f} GMAC/s", flush=True)
    whole = statistics.median(prompt_pass_ms(model, list(range(1000, 1000 + PROMPT_ROWS))) for _ in range(5))
    print(f"{name}: the linears of all {len(model.layers)} layers {layer_ms * len(model.layers):.0f} ms "
          f"of a {PROMPT_ROWS}-token prompt pass of {whole:.0f} ms")
