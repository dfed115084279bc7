"""The draft reading only the start and the end of a long context, offline: what it keeps of agreement.

A draft token costs more as the context grows (``specdec-bench steps`` on the Zen 4: 8.9 / 11.2 /
21.2 ms after 128 / 4,096 / 12,000 positions), and the draft only proposes, so it could read less of
a long context than the target does: its first ``SINK`` tokens (the system message and the start of
the first user message) and the last W. Here, on the long-context runs' chat (an 8,000-token pasted
text of this package's code and eight questions about it), the target's own greedy answers (256
tokens each, target-only), then the draft teacher-forced over each answer after the whole prompt and
after each window of it: how often its greedy token is the target's, over the whole answers and over
the positions where `hybrid`'s strict lookup finds no copy (where the model drafts). Then a draft
token's time after each window's context.

Run: .venv/bin/python docs/benchmarks/2026-12-07-draft-window-long-offline.py   # output: 2026-12-07-draft-window-long-offline.txt
"""

from __future__ import annotations

import statistics
import time

from paired_levers import code_questions, draft_top, pasted_code

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.engine.drafters import find_continuation
from specdec_tui.runtime import load_runtime

SINK = 32
WINDOWS = [None, 4096, 2048, 1024]
runtime = load_runtime(Settings())
draft = runtime.engine.draft
assert draft is not None
pasted = pasted_code(runtime)


def windowed(ids: list[int], window: int | None) -> list[int]:
    return ids if window is None or len(ids) <= SINK + window else ids[:SINK] + ids[-window:]


def no_copy(context: list[int]) -> bool:
    return not any(find_continuation(context, n, 1) for n in (4, 3))


agreement: dict[int | None, list[float]] = {w: [] for w in WINDOWS}
where_model: dict[int | None, list[float]] = {w: [] for w in WINDOWS}
for number, messages in enumerate(code_questions(pasted)):
    prompt = runtime.prompt_ids(messages)
    answer = next(list(event.token_ids) for event in runtime.reply(messages, runtime.params(max_new_tokens=256), "target")
                  if isinstance(event, FinishedEvent))
    modelled = [i for i in range(len(answer)) if no_copy(prompt + answer[:i])]
    line = [f"question {number + 1}: prompt {len(prompt)}, answer {len(answer)}, no copy at {len(modelled)}"]
    for window in WINDOWS:
        top = draft_top(draft, windowed(prompt, window), answer, 1)[0][:, 0].tolist()
        same = [top[i] == answer[i] for i in range(len(answer))]
        agreement[window].append(sum(same) / len(same))
        where_model[window].append(sum(same[i] for i in modelled) / max(len(modelled), 1))
        line.append(f"{window or 'whole'} {agreement[window][-1]:.3f} / {where_model[window][-1]:.3f}")
    print(" | ".join(line), flush=True)

for window in WINDOWS:
    print(f"draft reads {'the whole prompt' if window is None else f'the first {SINK} and the last {window}'}: "
          f"agreement, mean over questions, whole answers {statistics.mean(agreement[window]):.3f}, "
          f"where no copy {statistics.mean(where_model[window]):.3f}")

# A draft token's time after each window's context (the last question's), median of 20.
for window in WINDOWS:
    ids = windowed(prompt, window)
    draft.reset()
    draft.prefill(ids)
    times = []
    for i in range(20):
        start = time.perf_counter()
        draft.logits_for([*ids, 1000 + i], 1)
        times.append(time.perf_counter() - start)
        ids = [*ids, 1000 + i]
    print(f"a draft token after {len(ids)} positions: {1e3 * statistics.median(times):.1f} ms")
