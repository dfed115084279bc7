"""Verify costs learnt at a shorter context, paired against forgetting them.

The adaptive K reads what a target pass over each row count costs from one table, learnt from every
pass (``VerifyCost``). Every row attends to the whole context, so those costs grow with it; a table
that keeps the costs of a chat's first replies steers later ones as if passes were still that cheap
(and caps every row count below a cheap old one at its figure). Each reply here is answered twice
with `hybrid`, alternating which goes first: once with a table that never forgets (``forget_after``
past any context: the engine before ``FORGET_AFTER_POSITIONS``) and once with the default, which
forgets a row count last measured more than that many positions away. Both answers must be the same
tokens. The rate is tokens over the seconds of the reply's draft and verify steps (no prefill). The
default settings throughout, the memory budget included.

Two chats:
- ``conversation`` (the default): the memory script's growing conversation (a tutorial, then "go
  on", each reply up to the chat's 512 new tokens). Each side keeps its own table and policies for
  the whole conversation.
- ``--jump``: three short replies, then a pasted text of 8,000 tokens (this package's engine and
  models code) with eight questions about it, 256 new tokens each. Each side answers each question
  from a copy of the table and policies the short replies taught; a first reply of four tokens has
  both caches read the text, so no answer pays for that.

Run: .venv/bin/python docs/benchmarks/2026-12-07-stale-verify-costs.py [TURNS] [--jump]
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from statistics import median

from paired_levers import paired_answers, paired_code_questions, pasted_after_short_replies

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import DecodeParams
from specdec_tui.engine.policy import FORGET_AFTER_POSITIONS, VerifyCost
from specdec_tui.runtime import load_runtime

SIDES = {"kept": 10**9, "forgotten": FORGET_AFTER_POSITIONS}
runtime = load_runtime(Settings())
engine = runtime.engine


def paired(label: str, messages: list[dict[str, str]], params: DecodeParams, number: int,
           state: Callable[[str], tuple[VerifyCost, dict]]) -> tuple[list[int], float]:
    """Both sides' answers to ``messages``, reported; the tokens and forgotten / kept."""
    return paired_answers(runtime, label, messages, params, number, tuple(SIDES), state)


def conversation(turns: int) -> None:
    sides = {side: (VerifyCost(forget_after=after), {}) for side, after in SIDES.items()}
    messages = [{"role": "user", "content": "Write a long, detailed tutorial on Python generators, with many code examples."}]
    ratios: list[tuple[int, float]] = []
    for number in range(turns):
        tokens, ratio = paired(f"turn {number + 1}: context {len(runtime.prompt_ids(messages))}", messages,
                               runtime.params(), number, sides.__getitem__)
        ratios.append((len(runtime.prompt_ids(messages)) + len(tokens), ratio))
        text = runtime.pair.target.tokenizer.decode(tokens, skip_special_tokens=True)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on, with more examples."}]
    short = [ratio for context, ratio in ratios if context < 3000]
    long = [ratio for context, ratio in ratios if context >= 3000]
    print(f"median forgotten / kept: replies ending under 3,000 positions {median(short):.3f} ({len(short)}), "
          f"from 3,000 {median(long):.3f} ({len(long)})")


def jump() -> None:
    taught, pasted = pasted_after_short_replies(runtime, VerifyCost(forget_after=10**9))

    def state(side: str) -> tuple[VerifyCost, dict]:
        table, policies = copy.deepcopy(taught)
        table.forget_after = SIDES[side]
        return table, policies

    ratios = paired_code_questions(runtime, pasted, tuple(SIDES), state)
    print(f"median forgotten / kept {median(ratios):.3f} over {len(ratios)} questions")


if "--jump" in sys.argv:
    jump()
else:
    conversation(int(next((arg for arg in sys.argv[1:] if arg.isdigit()), "14")))
