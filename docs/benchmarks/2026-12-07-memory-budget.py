"""A chat's memory under the memory budget: one conversation of long `hybrid` replies through the
runtime, as the chat sends them (this folder's README, "A memory budget").

Loads the pair with the default settings (the budget `models.memory_budget_gb`, 3.0 unless
SPECDEC_MODELS__MEMORY_BUDGET_GB says otherwise), asks for a tutorial, then asks it to go on, TURNS
times, each reply up to the chat's default 512 new tokens, greedy. After each reply: the context, the
process's resident memory and its peak (VmRSS, VmHWM), the int8 blocks the target still holds, the
reply's tokens a second, and the budget's note where it dropped blocks before that reply. With
``--compare``, each reply is also decoded target-only from fresh caches and must be identical.

Run: .venv/bin/python docs/benchmarks/2026-12-07-memory-budget.py [TURNS] [--compare]
Output of 2026-12-07 (Zen 4 EPYC, with --compare): 2026-12-07-memory-budget.txt beside this file.
"""

from __future__ import annotations

import sys

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.runtime import load_runtime

turns = int(next((arg for arg in sys.argv[1:] if arg.isdigit()), "4"))
compare = "--compare" in sys.argv


def status(name: str) -> float:
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(name)) * 1024 / 1e9  # kB: KiB


def finished(events: object) -> FinishedEvent:
    *_, last = events  # type: ignore[misc]
    assert isinstance(last, FinishedEvent)
    return last


runtime = load_runtime(Settings())
budget = runtime.memory
print(f"budget {runtime.settings.models.memory_budget_gb} GB ({'active' if budget else 'nothing to drop here'}); "
      f"after loading: resident {status('VmRSS:'):.2f} GB")
params = runtime.params()
messages = [{"role": "user", "content": "Write a long, detailed tutorial on Python generators, with many code examples."}]
for turn in range(turns):
    note = budget.note if budget else None
    reply = finished(runtime.reply(messages, params, "hybrid"))
    text = runtime.pair.target.tokenizer.decode(reply.token_ids, skip_special_tokens=True)
    context = len(runtime.prompt_ids(messages)) + len(reply.token_ids)
    held = runtime.pair.target.runner.int8_block_bytes / 1e9
    print(f"turn {turn + 1}: {len(reply.token_ids)} tokens at {reply.summary.tokens_per_s:.1f} tok/s, context {context}; "
          f"resident {status('VmRSS:'):.2f} GB, peak {status('VmHWM:'):.2f} GB; int8 blocks held {held:.2f} GB")
    if budget and budget.note != note:
        print(f"  before it, {budget.note}")
    if compare:
        alone = finished(runtime.generate(runtime.prompt_ids(messages), params, "target", fresh=True))
        print(f"  identical to target-only: {alone.token_ids == reply.token_ids}")
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on, with more examples."}]
