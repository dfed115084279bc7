"""How many of the target's head columns an exact greedy head would still have to sum in full, if it
first read only the high nibbles of the int8 weights (this folder's README, "An int8 head from its
high nibbles, offline").

Greedy acceptance at tau = 1 reads of each row of the target's logits only its largest. Each int8
weight of the head is 16 h + l (h in [-8, 7], l in [0, 15]). A pass over the high nibbles alone,
half the head's 233 MB, gives each column's sum of a h exactly (a: the row's activations, quantized
as the int8 kernel does); the rest, the sum of a l, lies within the column's mean l times the sum of
a, plus or minus the norm of (l - mean) times the norm of a (Cauchy-Schwarz). A column whose bound
stays under the row's largest logit can be left out; the others need their low nibbles read and
summed. This counts those columns on every position of the target's own replies to every other
prompt of the suite (greedy, 128 new tokens), by category: the share of the head's low nibbles a
row would still read.

Run: .venv/bin/python docs/benchmarks/2026-12-06-near-max-head-offline.py
The output of 2026-12-06 (Intel Xeon, 2 cores) is 2026-12-06-near-max-head-offline.txt beside this file.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import torch
from paired_levers import mode_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime


def main() -> None:
    torch.set_grad_enabled(False)
    runtime = load_runtime(Settings())
    runner = runtime.pair.target.runner
    head = runner.head
    blocks, groups, columns, inputs = head.packed.shape
    weights = head.packed.permute(0, 2, 1, 3).reshape(blocks * columns, groups * inputs)
    weights = weights[: head.out_features, : head.in_features].double()
    scales = head.scales[: head.out_features].double()
    high = torch.div(weights, 16, rounding_mode="floor")
    low = weights - 16 * high
    low_mean = low.mean(dim=1)
    low_spread = (low - low_mean[:, None]).norm(dim=1)

    inputs_seen: list[torch.Tensor] = []

    class Recorder(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inputs_seen.append(x.clone())
            return head(x)

    kept: dict[str, list[int]] = defaultdict(list)
    for item in load_suite(default_suite_path())[::2]:
        prompt = runtime.prompt_ids(item.messages)
        reply = list(mode_reply(runtime, prompt, "target").token_ids)
        runner.reset()
        runner.head = Recorder()
        runner.forward(prompt + reply[:-1], len(reply))
        runner.head = head
        x = inputs_seen.pop().double()
        peak = x.abs().amax(dim=1, keepdim=True)
        a = torch.round(x * (63 / peak))  # the int8 kernel's activations (round half to even, as it does)
        to_logits = scales[None, :] * (peak / 63)
        exact = (a @ weights.T) * to_logits
        centre = 16 * (a @ high.T) + low_mean[None, :] * a.sum(dim=1, keepdim=True)
        bound = (centre + low_spread[None, :] * a.norm(dim=1, keepdim=True)) * to_logits
        rows = (bound >= exact.max(dim=1, keepdim=True).values).sum(dim=1).tolist()
        kept[item.category].extend(rows)
        print(f"{item.id}: {len(reply)} rows, columns left to sum: median {statistics.median(rows):.0f}, "
              f"most {max(rows)}", flush=True)

    print(f"\n| of {head.out_features} columns, per row | median | 90th percentile | rows under 1,000 |")
    print("|---|---|---|---|")
    for category, rows in kept.items():
        rows.sort()
        under = sum(n < 1000 for n in rows) / len(rows)
        print(f"| {category} ({len(rows)} rows) | {statistics.median(rows):.0f} | {rows[int(0.9 * len(rows))]} | "
              f"{under:.0%} |")


if __name__ == "__main__":
    main()
