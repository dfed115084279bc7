"""Where a reply's seconds go, target-only beside `hybrid`, on every prompt of the suite.

Each prompt is decoded by target-only and by `hybrid` (default settings, greedy, 128 new tokens,
fresh caches, the order alternating from prompt to prompt), and each reply's time is split, from
its step records, into:

- the target's prompt pass (the time to the first step's start);
- the draft's prompt pass (`hybrid` only: the first step's draft time less its drafted tokens at the
  reply's median cost per drafted token);
- drafting (every other draft second) and verify passes (the target's passes after the prompt);
- the rest (detokenizing, bookkeeping, the events).

Per category it prints the medians of each share and of `hybrid`'s speedup, and the speedup the
same replies would have if neither prompt pass cost anything: how much of what `hybrid` gains in
its steps the prompt passes take back.

Run: .venv/bin/python docs/benchmarks/2026-12-04-time-split.py
The output of 2026-12-04 (AMD EPYC Zen 3, 2 cores, AVX2) is 2026-12-04-time-split.txt beside this file;
that of 2026-12-06 (the Intel Xeon with AVX-512 VNNI, 2 cores) 2026-12-06-time-split-xeon.txt.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent, StepEvent
from specdec_tui.engine.metrics import StepRecord
from specdec_tui.runtime import Runtime, load_runtime

MODES = ("target", "hybrid")


@dataclass(frozen=True)
class Split:
    tokens: tuple[int, ...]
    seconds: float
    target_prompt: float
    draft_prompt: float
    drafting: float
    verify: float

    @property
    def prompt(self) -> float:
        return self.target_prompt + self.draft_prompt

    @property
    def rest(self) -> float:
        return self.seconds - self.prompt - self.drafting - self.verify


def split_reply(runtime: Runtime, ids: list[int], mode: str) -> Split:
    records: list[StepRecord] = []
    for event in runtime.generate(ids, runtime.params(max_new_tokens=128), mode, fresh=True):
        if isinstance(event, StepEvent):
            records.append(event.record)
        elif isinstance(event, FinishedEvent):
            summary, tokens = event.summary, event.token_ids
    first = records[0]
    per_token = [r.draft_s / r.drafted for r in records[1:] if r.drafted]
    typical = statistics.median(per_token) if per_token else 0.0
    draft_prompt = max(first.draft_s - first.drafted * typical, 0.0) if mode != "target" else 0.0
    drafting = sum(r.draft_s for r in records) - draft_prompt
    return Split(tokens, summary.seconds, summary.ttft_s - first.seconds, draft_prompt, drafting,
                 sum(r.verify_s for r in records))


def main() -> None:
    runtime = load_runtime(Settings())
    warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
    for mode in MODES:
        split_reply(runtime, warm, mode)
    rows: dict[str, list[tuple[Split, Split]]] = defaultdict(list)
    for i, item in enumerate(load_suite(default_suite_path())):
        ids = runtime.prompt_ids(item.messages)
        order = MODES if i % 2 == 0 else MODES[::-1]
        result = {mode: split_reply(runtime, ids, mode) for mode in order}
        target, hybrid = result["target"], result["hybrid"]
        assert hybrid.tokens == target.tokens, item.id  # identical to target-only
        rows[item.category].append((target, hybrid))
        print(f"{item.id}: {len(ids)} prompt tokens, {len(target.tokens)} new; target {target.seconds:.2f} s "
              f"(prompt {target.target_prompt:.2f}); hybrid {hybrid.seconds:.2f} s (target's prompt "
              f"{hybrid.target_prompt:.2f}, draft's {hybrid.draft_prompt:.2f}, drafting {hybrid.drafting:.2f}, "
              f"verify {hybrid.verify:.2f}, rest {hybrid.rest:.2f})", flush=True)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}"

    print("\n| median per prompt | " + " | ".join(rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    lines = {
        "target-only: prompt pass, s": lambda t, h: t.target_prompt,
        "target-only: steps, s": lambda t, h: t.seconds - t.target_prompt,
        "hybrid: target's prompt pass, s": lambda t, h: h.target_prompt,
        "hybrid: draft's prompt pass, s": lambda t, h: h.draft_prompt,
        "hybrid: drafting, s": lambda t, h: h.drafting,
        "hybrid: verify passes, s": lambda t, h: h.verify,
        "hybrid: the rest, s": lambda t, h: h.rest,
        "hybrid: share in the two prompt passes": lambda t, h: h.prompt / h.seconds,
        "hybrid / target": lambda t, h: t.seconds / h.seconds,
        "hybrid / target, steps alone (no prompt pass)": lambda t, h: (t.seconds - t.prompt) / (h.seconds - h.prompt),
    }
    for name, value in lines.items():
        print(f"| {name} | " + " | ".join(med([value(t, h) for t, h in pairs]) for pairs in rows.values()) + " |")


if __name__ == "__main__":
    main()
