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
from pathlib import Path
from statistics import median

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, StepEvent
from specdec_tui.engine.policy import FORGET_AFTER_POSITIONS, VerifyCost
from specdec_tui.runtime import load_runtime

SIDES = {"kept": 10**9, "forgotten": FORGET_AFTER_POSITIONS}
runtime = load_runtime(Settings())
engine = runtime.engine


def answer(messages: list[dict[str, str]], params: DecodeParams) -> tuple[list[int], float, float]:
    """One `hybrid` reply with the engine's current table: its tokens, step rate and mean rows a pass."""
    seconds, rows, steps = 0.0, 0, 0
    for event in runtime.reply(messages, params, "hybrid"):
        if isinstance(event, StepEvent):
            seconds, rows, steps = seconds + event.record.seconds, rows + event.record.rows, steps + 1
        elif isinstance(event, FinishedEvent):
            tokens = list(event.token_ids)
    return tokens, len(tokens) / seconds, rows / steps


def paired(label: str, messages: list[dict[str, str]], params: DecodeParams, number: int,
           state: Callable[[str], tuple[VerifyCost, dict]]) -> tuple[list[int], float]:
    """Both sides' answers to ``messages``, reported; the tokens and forgotten / kept."""
    results = {}
    for side in list(SIDES) if number % 2 == 0 else list(SIDES)[::-1]:
        engine.decoder.verify_cost, engine.policies = state(side)
        results[side] = answer(messages, params)
    assert results["kept"][0] == results["forgotten"][0], f"{label}: the answers differ"
    ratio = results["forgotten"][1] / results["kept"][1]
    print(f"{label}, {len(results['kept'][0])} tokens; kept {results['kept'][1]:.1f} tok/s (rows {results['kept'][2]:.1f}), "
          f"forgotten {results['forgotten'][1]:.1f} tok/s (rows {results['forgotten'][2]:.1f}); "
          f"forgotten / kept {ratio:.3f}", flush=True)
    return results["kept"][0], ratio


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
    params = runtime.params(max_new_tokens=256)
    engine.decoder.verify_cost, engine.policies = VerifyCost(forget_after=10**9), {}
    for question in ["Write a Python function that reverses the words in a sentence.",
                     "Explain in a paragraph what a hash map is.",
                     "Write a Python class for a stack with push, pop and peek."]:
        answer([{"role": "user", "content": question}], params)
    taught = (engine.decoder.verify_cost, engine.policies)
    engine.decoder.verify_cost, engine.policies = copy.deepcopy(taught)  # the text's first reply teaches neither side
    package = Path(__file__).resolve().parents[2] / "specdec_tui"
    code = "".join(path.read_text() for folder in ("engine", "models") for path in sorted((package / folder).glob("*.py")))
    tokenizer = runtime.pair.target.tokenizer
    pasted = tokenizer.decode(tokenizer(code)["input_ids"][:8000])
    answer([{"role": "user", "content": pasted + "\n\nHi."}], runtime.params(max_new_tokens=4))

    def state(side: str) -> tuple[VerifyCost, dict]:
        table, policies = copy.deepcopy(taught)
        table.forget_after = SIDES[side]
        return table, policies

    questions = ["Write a short summary of what the code above does.",
                 "Write a Python function that counts the classes defined in the code above.",
                 "Which class above would you test first, and why? One paragraph.",
                 "Rewrite the first function above with clearer names.",
                 "List five possible bugs in the code above.",
                 "Write a unit test for the VerifyCost class above.",
                 "Explain the policy's choice of K above to a new engineer.",
                 "Write a docstring for the Engine class above."]
    ratios = [paired(f"question {number + 1}", [{"role": "user", "content": pasted + "\n\n" + question}], params,
                     number, state)[1] for number, question in enumerate(questions)]
    print(f"median forgotten / kept {median(ratios):.3f} over {len(ratios)} questions")


if "--jump" in sys.argv:
    jump()
else:
    conversation(int(next((arg for arg in sys.argv[1:] if arg.isdigit()), "14")))
