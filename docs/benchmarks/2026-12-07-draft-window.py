"""The draft reading only the start and the latest tokens of a long context (``draft_window``), paired.

The long-context chat of ``2026-12-07-stale-verify-costs.py --jump``: three short replies, then an
8,000-token pasted text of this package's code and eight questions about it. Per question, each side
in turn (the order alternating), from a copy of the table and policies the short replies taught and
with the draft's cache emptied, as after a paste the draft has not read:

1. a 16-token reply, timed whole: the draft's reading of the context is in it (the target's cache
   holds the text for both sides, so it reads only the question);
2. then the 256-token answer, its rate over its draft and verify steps (the draft's cache now holds
   what its side reads).

Sides: ``whole`` (``draft_window = 0``, the draft reads all of the context) and ``window``
(``draft_window = WINDOW``: past 32 + WINDOW + 1024 tokens it reads the first 32 and the latest
WINDOW to WINDOW + 1024). Both sides' answers are asserted the same tokens.

Run: .venv/bin/python docs/benchmarks/2026-12-07-draft-window.py [WINDOW]   # output: 2026-12-07-draft-window.txt
"""

from __future__ import annotations

import copy
import sys
import time
from statistics import median

from paired_levers import chat_answer, code_questions, pasted_after_short_replies

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.runtime import load_runtime

WINDOW = int(sys.argv[1]) if sys.argv[1:] else 2048
SIDES = {"whole": 0, "window": WINDOW}
runtime = load_runtime(Settings())
engine = runtime.engine
draft = engine.draft
assert draft is not None
taught, pasted = pasted_after_short_replies(runtime, VerifyCost())

first_ratios, rate_ratios = [], []
for number, messages in enumerate(code_questions(pasted)):
    results = {}
    for side in list(SIDES) if number % 2 == 0 else list(SIDES)[::-1]:
        draft.window = SIDES[side]
        engine.decoder.verify_cost, engine.policies = copy.deepcopy(taught)
        draft.reset()
        start = time.perf_counter()
        first = next(list(event.token_ids) for event in runtime.reply(messages, runtime.params(max_new_tokens=16), "hybrid")
                     if isinstance(event, FinishedEvent))
        seconds = time.perf_counter() - start
        read = len(draft.ids)
        tokens, rate, rows = chat_answer(runtime, messages, runtime.params(max_new_tokens=256))
        results[side] = (first, seconds, read, tokens, rate, rows)
    (first_w, seconds_w, read_w, tokens_w, rate_w, rows_w) = results["whole"]
    (first_n, seconds_n, read_n, tokens_n, rate_n, rows_n) = results["window"]
    assert first_w == first_n and tokens_w == tokens_n, f"question {number + 1}: the answers differ"
    first_ratios.append(seconds_w / seconds_n)
    rate_ratios.append(rate_n / rate_w)
    print(f"question {number + 1}: 16-token reply whole {seconds_w:.1f} s (the draft read {read_w}), window "
          f"{seconds_n:.1f} s (read {read_n}): whole / window {first_ratios[-1]:.3f}; {len(tokens_w)}-token answer "
          f"whole {rate_w:.1f} tok/s (rows {rows_w:.1f}), window {rate_n:.1f} tok/s (rows {rows_n:.1f}): "
          f"window / whole {rate_ratios[-1]:.3f}", flush=True)
print(f"median: the 16-token reply whole / window {median(first_ratios):.3f}; the answers' rate window / whole "
      f"{median(rate_ratios):.3f} (lowest {min(rate_ratios):.3f}, highest {max(rate_ratios):.3f})")
