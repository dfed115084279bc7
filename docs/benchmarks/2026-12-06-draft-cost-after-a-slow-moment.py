"""One engine's `hybrid` replies before, during and after another process takes both cores for a
while: how the draft's learnt cost recovers (or not) from that slow moment. The folder's README
section "A slow moment stopped drafting for good" tells what it found.

One engine, as the chat and the bench keep one: a warm-up reply, one held-out code prompt, then a
busy process (a float32 matmul loop, 2 threads) starts for ``--hog`` seconds and the engine answers
eight more held-out prompts. A line per reply: tokens/s, steps, drafted tokens accepted per step,
and the model drafter's learnt draft cost and acceptance afterwards. ``--before`` learns the draft
cost as the policy did before this change (``DraftCostBefore``).

Run: .venv/bin/python docs/benchmarks/2026-12-06-draft-cost-after-a-slow-moment.py [--before] [--hog 20]
Output of 2026-12-06 (Zen 4 EPYC, 2 cores): 2026-12-06-draft-cost-after-a-slow-moment.txt.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from paired_levers import DraftCostBefore, decoded

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

HELD_OUT = Path(__file__).with_name("2026-12-05-held-out-prompts.jsonl")
BUSY = "import time, torch\nend = time.time() + {}\nx = torch.randn(2000, 2000)\nwhile time.time() < end: x @ x"


parser = argparse.ArgumentParser()
parser.add_argument("--before", action="store_true")
parser.add_argument("--hog", type=float, default=20.0, help="seconds the busy process runs")
args = parser.parse_args()

runtime = load_runtime(Settings())
engine = runtime.engine
params = runtime.params(max_new_tokens=128)
if args.before:
    engine.policies["model"] = DraftCostBefore(engine.decoder.verify_cost)
items = [json.loads(line) for line in HELD_OUT.read_text().splitlines()]
items = [item for item in items if "-gen-" in item["id"]][:6] + [item for item in items if "-prose-" in item["id"]][:3]


def reply(name: str, messages: list[dict[str, str]]) -> None:
    ids = runtime.prompt_ids(messages)
    summary = decoded(engine, ids, params, engine.drafter("hybrid", params)).summary
    policy = engine.policies["model"]
    print(f"{name:20s} {summary.tokens_per_s:5.1f} tok/s, {summary.steps:3d} steps, "
          f"{summary.mean_accepted:.2f} accepted a step, draft cost {policy.draft_cost * 1000:5.1f} ms, "
          f"alpha {policy.alpha:.2f}", flush=True)


print("policy:", "before" if args.before else "now")
reply("warm-up", [{"role": "user", "content": "Say hi."}])
reply(items[0]["id"], items[0]["messages"])
subprocess.Popen([sys.executable, "-c", BUSY.format(args.hog)])
print(f"a busy process starts, for {args.hog:.0f} s")
for item in items[1:]:
    reply(item["id"], item["messages"])
