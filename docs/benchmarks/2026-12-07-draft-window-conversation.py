"""The draft's window in a conversation that grows a reply at a time, paired: what moving it costs.

``2026-12-07-draft-window.py`` asks every question from the same context, so its window never moves
between replies. Here a conversation grows (a tutorial, then "go on", each reply up to the chat's 512
new tokens, to about 7,400 positions), and two runtimes over two loads of the default pair answer each
turn in turn (the order alternating): ``whole`` (``draft_window = 0``) and ``window`` (``draft_window =
2048``). Each keeps its own caches for the whole conversation, as a chat does. Where the window moves
(once per 1,024 tokens of growth) the window side's draft read its window again at the first reply
after it, in the design this script first measured; since, its cache drops the positions passed and
reads nothing again. Per
turn: each side's whole reply, timed from the request to the last token (prompt passes included), and
whether the window side's window moved at it; the answers are asserted the same tokens.

``--window-first`` loads the window side's pair first, to see what the order of the two loads gives.

Run: .venv/bin/python docs/benchmarks/2026-12-07-draft-window-conversation.py [TURNS] [--window-first]   # output: 2026-12-07-draft-window-conversation.txt
"""

from __future__ import annotations

import sys
import time
from statistics import median

from specdec_tui.config import ModelSettings, Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.runtime import Runtime, load_runtime

TURNS = int(next((arg for arg in sys.argv[1:] if arg.isdigit()), "14"))
#: The context past which the window side's draft reads a window (32 + 2,048 + 1,024 tokens).
WINDOW_FROM = 32 + 2048 + 1024
LOAD_ORDER = ["window", "whole"] if "--window-first" in sys.argv else ["whole", "window"]
LOADED = {side: load_runtime(Settings(models=ModelSettings(draft_window=2048 if side == "window" else 0)))
          for side in LOAD_ORDER}
SIDES = {"whole": LOADED["whole"], "window": LOADED["window"]}


def timed_reply(runtime: Runtime, messages: list[dict[str, str]]) -> tuple[list[int], float]:
    """The reply's tokens and its seconds from request to last token."""
    start = time.perf_counter()
    for event in runtime.reply(messages, runtime.params(), "hybrid"):
        if isinstance(event, FinishedEvent):
            return list(event.token_ids), time.perf_counter() - start
    raise RuntimeError("a reply ended without its summary")


messages = [{"role": "user", "content": "Write a long, detailed tutorial on Python generators, with many code examples."}]
rows: list[tuple[int, float, bool]] = []
for turn in range(TURNS):
    context = len(SIDES["window"].prompt_ids(messages))
    draft = SIDES["window"].engine.draft
    assert draft is not None
    start_before = draft.window_start
    results = {side: timed_reply(SIDES[side], messages)
               for side in (list(SIDES) if turn % 2 == 0 else list(SIDES)[::-1])}
    (tokens, whole_s), (window_tokens, window_s) = results["whole"], results["window"]
    assert tokens == window_tokens, f"turn {turn + 1}: the answers differ"
    moved = draft.window_start != start_before
    rows.append((context, whole_s / window_s, moved))
    print(f"turn {turn + 1}: context {context}, {len(tokens)} tokens; whole {whole_s:.1f} s, window {window_s:.1f} s "
          f"(window from {draft.window_start}{', moved' if moved else ''}); whole / window "
          f"{whole_s / window_s:.3f}", flush=True)
    text = SIDES["whole"].pair.target.tokenizer.decode(tokens, skip_special_tokens=True)
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on, with more examples."}]
windowed = [ratio for context, ratio, _ in rows if context > WINDOW_FROM]
before = [ratio for context, ratio, _ in rows if context + 512 <= WINDOW_FROM]
print(f"loaded first: {LOAD_ORDER[0]}; median whole / window over the {len(before)} replies that end before "
      f"{WINDOW_FROM:,} positions (no window): {median(before):.3f}")
print(f"median whole / window over the {len(windowed)} replies past {WINDOW_FROM:,} positions: {median(windowed):.3f}; "
      f"the replies whose window moved: "
      f"{', '.join(f'{ratio:.3f}' for _, ratio, moved in rows if moved) or 'none'}; the others past {WINDOW_FROM:,}: "
      f"{', '.join(f'{ratio:.3f}' for context, ratio, moved in rows if not moved and context > WINDOW_FROM)}")
