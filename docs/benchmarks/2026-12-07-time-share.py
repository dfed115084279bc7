"""Where `hybrid`'s time goes, by category (2026-12-07; this folder's README, "A draft on fewer bits,
offline (not built)").

Every suite prompt once, greedy, 128 new tokens, `hybrid` with the default settings on one engine
(two warm-up replies first): per category, the shares of the replies' time spent drafting, in the
target's verify passes and elsewhere (the prompt passes, the detokenizer), the tokens, drafted
tokens, kept drafted tokens and rows a step, and the verify passes by row count with their mean time.

Run: .venv/bin/python docs/benchmarks/2026-12-07-time-share.py
Output of 2026-12-07 (Zen 4 EPYC): 2026-12-07-time-share.txt beside this file.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from paired_levers import engine_with

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent, StepEvent
from specdec_tui.engine.metrics import RunSummary, StepRecord
from specdec_tui.runtime import load_runtime

runtime = load_runtime(Settings())
engine = engine_with(runtime)
params = runtime.params(max_new_tokens=128)


def reply(ids: list[int]) -> tuple[list[StepRecord], RunSummary]:
    engine.reset()
    records: list[StepRecord] = []
    for event in engine.decoder.generate(ids, params, engine.drafter("hybrid", params)):
        if isinstance(event, StepEvent):
            records.append(event.record)
        elif isinstance(event, FinishedEvent):
            return records, event.summary
    raise RuntimeError("a reply ended without its summary")


warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
for _ in range(2):
    reply(warm)
totals: dict[str, Counter] = defaultdict(Counter)
passes: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
for item in load_suite(default_suite_path()):
    records, summary = reply(runtime.prompt_ids(item.messages))
    total = totals[item.category]
    total["seconds"] += summary.seconds
    total["steps"] += len(records)
    for record in records:
        total["draft"] += record.draft_s
        total["verify"] += record.verify_s
        total["tokens"] += record.emitted
        total["drafted"] += record.drafted
        total["kept"] += record.accepted
        total["rows"] += record.rows
        passes[item.category][record.rows].append(record.verify_s)
for category, total in totals.items():
    seconds, steps = total["seconds"], total["steps"]
    print(f"{category}: {seconds:.1f} s; drafting {total['draft'] / seconds:.2f}, verify passes "
          f"{total['verify'] / seconds:.2f}, the rest {(seconds - total['draft'] - total['verify']) / seconds:.2f}; "
          f"a step: {total['tokens'] / steps:.2f} tokens, {total['drafted'] / steps:.2f} drafted, "
          f"{total['kept'] / steps:.2f} kept, {total['rows'] / steps:.2f} rows")
    print("  passes by rows (count, mean ms):", ", ".join(
        f"{rows}: {len(times)} ({1000 * sum(times) / len(times):.0f})" for rows, times in sorted(passes[category].items())))
