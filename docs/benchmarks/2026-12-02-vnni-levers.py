"""The paired lever run of 2026-12-02 (README, "Branches and longer copies, paired").

Interleaved per prompt in one process (the order rotates from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings otherwise; each variant has its own engine
(its own adaptive-K policies and verify-cost table) over the one loaded pair:

- target: target-only decoding;
- A: the previous default: hybrid, copies of at most K (lookup_k 4), no branches, the verify-cost
  table read as measured;
- B: copies of up to 8 tokens, the table capped (fewer rows never dearer than more);
- C: B with branches, draft length and branch count chosen together (today's default).

Run: .venv/bin/python docs/benchmarks/2026-12-02-vnni-levers.py
Its output of that evening is 2026-12-02-vnni-levers.txt beside it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent, StepEvent
from specdec_tui.engine.policy import VerifyCost
from specdec_tui.runtime import build_engine, load_runtime


class UncappedVerifyCost(VerifyCost):
    """The table as it was read before: a measurement as it stands, however noisy."""

    def __call__(self, rows: int) -> float:
        return self.measured[rows] if rows in self.measured else self._on_line(rows)


runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in "ABC"}
engines["A"].decoder.verify_cost = UncappedVerifyCost()
#: lookup_k and whether the model draft offers branches, per variant.
VARIANTS = {"A": (4, False), "B": (8, False), "C": (8, True)}
NAMES = ["target", *VARIANTS]


def run(ids: list[int], name: str) -> tuple[tuple[int, ...], object, int, int]:
    engine = engines["A" if name == "target" else name]
    lookup_k, branching = VARIANTS.get(name, (4, False))
    params = runtime.params(max_new_tokens=128, lookup_k=lookup_k)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if drafter is not None:
        drafter.model.branching = branching
    engine.reset()
    kept = branch_steps = 0
    for event in engine.decoder.generate(ids, params, drafter):
        if isinstance(event, StepEvent):
            kept += event.record.branch_kept
            branch_steps += event.record.branches > 0
        elif isinstance(event, FinishedEvent):
            return event.token_ids, event.summary, kept, branch_steps
    raise RuntimeError("a reply ended without its summary")


suite = load_suite(default_suite_path())
warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
for name in NAMES:
    run(warm, name)
ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
for i, item in enumerate(suite):
    ids = runtime.prompt_ids(item.messages)
    order = NAMES[i % 4 :] + NAMES[: i % 4]
    results = {name: run(ids, name) for name in order}
    base = results["target"][1].tokens_per_s
    line = [item.id, f"target {base:.1f}"]
    for name in VARIANTS:
        tokens, summary, kept, branch_steps = results[name]
        assert tokens == results["target"][0], (item.id, name)  # identical to target-only
        ratios[item.category][name].append(summary.tokens_per_s / base)
        line.append(f"{name} {summary.tokens_per_s / base:.2f} (acc {summary.acceptance_rate or 0:.2f}, "
                    f"steps {summary.steps}, branch steps {branch_steps}, kept {kept})")
    print(" | ".join(line), flush=True)
for category, by in ratios.items():
    print(category, "x target, median:", {k: round(statistics.median(v), 3) for k, v in by.items()},
          "lowest:", {k: round(min(v), 3) for k, v in by.items()})
    for a, b in (("B", "A"), ("C", "B"), ("C", "A")):
        paired = [x / y for x, y in zip(by[a], by[b], strict=True)]
        print(f"  {a} / {b}: paired median {statistics.median(paired):.3f}, min {min(paired):.3f}, "
              f"max {max(paired):.3f}")
