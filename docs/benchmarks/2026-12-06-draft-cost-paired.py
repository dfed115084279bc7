"""The draft cost learnt as now (a typical draft's time clipped to a quarter over the estimate, a
draft that first read skipped tokens believed where cheaper) against as before, on a quiet machine:
the paired side of this folder's README section "A slow moment stopped drafting for good".

All 28 prompts interleaved per prompt, the order rotating, greedy, 128 new tokens: target-only,
`hybrid` learning as now ("now") and as before ("before"), each on an engine of its own whose
policies last from reply to reply. Every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-06-draft-cost-paired.py
Output of 2026-12-06 (Zen 4 EPYC, 2 cores): 2026-12-06-draft-cost-paired.txt.
"""

from __future__ import annotations

from paired_levers import DraftCostBefore, Reply, engine_with, hybrid_reply, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
engines = {name: engine_with(runtime) for name in ("target", "now", "before")}
engines["before"].policies["model"] = DraftCostBefore(engines["before"].decoder.verify_cost)


def run(ids: list[int], name: str) -> Reply:
    return hybrid_reply(runtime, engines[name], ids, name)


print_paired(interleaved(runtime, ["now", "before"], run), [("now", "before")])
