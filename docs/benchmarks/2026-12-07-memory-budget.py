"""A chat's memory under the memory budget: one conversation of long `hybrid` replies through the
runtime, as the chat sends them (this folder's README, "A memory budget").

Loads the pair with the default settings (the budget `models.memory_budget_gb`, 3.0 unless
SPECDEC_MODELS__MEMORY_BUDGET_GB says otherwise), asks for a tutorial, then asks it to go on, TURNS
times, each reply up to the chat's default 512 new tokens, greedy. After each reply: the context, the
process's resident memory and its peak (VmRSS, VmHWM), the int8 blocks the target still holds, the
reply's tokens a second, and the budget's note where it dropped blocks before that reply. Then a new
chat of two short questions, after which the budget takes back the blocks that fit again. With
``--compare``, each reply is also decoded target-only from fresh caches and must be identical.

``--instruction-set avx2`` runs the products as a processor without AVX-512 VNNI does: the target then
reads only its int8 blocks, so the budget's one step is the draft's cache, and the run shows where such
a host's chat passes the budget.

Run: .venv/bin/python docs/benchmarks/2026-12-07-memory-budget.py [TURNS] [--compare] [--instruction-set NAME]
Outputs of 2026-12-07 (Zen 4 EPYC), beside this file: 2026-12-07-memory-budget.txt (4 --compare),
-memory-budget-22.txt (22), -memory-budget-26.txt (26, the draft's cache narrowed past the blocks),
-memory-budget-avx2.txt (20 --instruction-set avx2) and -avx2-before.txt (18, before the budget acted there);
with the draft's window on by default, -memory-budget-32-window.txt (32) and -memory-budget-avx2-window.txt
(24 --instruction-set avx2).
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.models import quantized_kernels
from specdec_tui.runtime import load_runtime

turns = int(next((arg for arg in sys.argv[1:] if arg.isdigit()), "4"))
compare = "--compare" in sys.argv
instruction_set = sys.argv[sys.argv.index("--instruction-set") + 1] if "--instruction-set" in sys.argv else None


def status(name: str) -> float:
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(name)) * 1024 / 1e9  # kB: KiB


def finished(events: object) -> FinishedEvent:
    *_, last = events  # type: ignore[misc]
    assert isinstance(last, FinishedEvent)
    return last


def turn(name: str, messages: list[dict[str, str]], follow_up: str) -> None:
    """One `hybrid` reply to ``messages``, reported, then it and ``follow_up`` added to them."""
    note = budget.note if budget else None
    reply = finished(runtime.reply(messages, params, "hybrid"))
    text = runtime.pair.target.tokenizer.decode(reply.token_ids, skip_special_tokens=True)
    context = len(runtime.prompt_ids(messages)) + len(reply.token_ids)
    held = runtime.pair.target.runner.int8_block_bytes / 1e9
    print(f"{name}: {len(reply.token_ids)} tokens at {reply.summary.tokens_per_s:.1f} tok/s, context {context}; "
          f"resident {status('VmRSS:'):.2f} GB, peak {status('VmHWM:'):.2f} GB; int8 blocks held {held:.2f} GB")
    if budget and budget.note != note:
        print(f"  before it, {budget.note}")
    if compare:
        note = budget.note if budget else None
        alone = finished(runtime.generate(runtime.prompt_ids(messages), params, "target", fresh=True))
        print(f"  identical to target-only: {alone.token_ids == reply.token_ids}")
        if budget and budget.note != note:
            print(f"  before that target-only reply, {budget.note}")
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": follow_up}]


with quantized_kernels.using_instruction_set(instruction_set) if instruction_set else nullcontext():
    runtime = load_runtime(Settings())
    budget = runtime.memory
    print(f"products: {quantized_kernels.instruction_set()}; "
          f"budget {runtime.settings.models.memory_budget_gb} GB ({'active' if budget else 'nothing to drop here'}); "
          f"after loading: resident {status('VmRSS:'):.2f} GB")
    params = runtime.params()
    messages = [{"role": "user",
                 "content": "Write a long, detailed tutorial on Python generators, with many code examples."}]
    for number in range(turns):
        turn(f"turn {number + 1}", messages, "Go on, with more examples.")
    new_chat = [{"role": "user", "content": "What is a Python decorator? Two sentences."}]
    for number in range(2):
        turn(f"new chat, turn {number + 1}", new_chat, "And a class decorator?")
