"""What the paired lever scripts beside this file share.

Every suite prompt is decoded by target-only and by each variant in one process, the order rotating
from prompt to prompt, each reply checked identical to target-only; the ratios to target-only are
collected per category and compared between variants, paired per prompt. The kernel scripts time
the target's whole pass under each variant in turn (``pass_times``).
"""

from __future__ import annotations

import copy
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, StepEvent
from specdec_tui.engine.drafters import Drafter
from specdec_tui.engine.metrics import RunSummary, StepRecord
from specdec_tui.engine.policy import DraftPolicy, VerifyCost, _ema
from specdec_tui.engine.session import Engine
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.runtime import Runtime, build_engine

#: One reply of a variant ("target" for target-only) to the prompt ids: its token ids, its summary,
#: and what else the script reports of it.
Reply = tuple[tuple[int, ...], RunSummary, str]
Ratios = dict[str, dict[str, list[float]]]


class PlannedLength(DraftPolicy):
    """The length policy before drafts stopped by confidence: a draft as long as the length it
    chose before drafting."""

    def plan(self, k_max: int, branching: bool = False) -> tuple[int, int]:
        self.length, branches = super().plan(k_max, branching)
        return self.length, branches

    def keep_drafting(self, confidences: Sequence[float], branches: int) -> bool:
        return len(confidences) < self.length


class DraftCostBefore(DraftPolicy):
    """The draft cost learnt as before 2026-12-06's night: a typical draft's time averaged in
    unclipped, a draft that first read skipped tokens teaching nothing (so a policy that stopped
    drafting because drafts looked dear never learnt otherwise)."""

    def observe(self, record: StepRecord, cost_is_typical: bool = True,
                confidences: Sequence[float] = (), branched: Sequence[int] = ()) -> None:
        cost = self.draft_cost
        super().observe(record, cost_is_typical, confidences, branched)
        if record.drafted:
            self.draft_cost = _ema(cost, record.draft_s / record.drafted) if cost_is_typical else cost


#: The long-context runs' chat: three short questions first, then questions about a pasted text.
SHORT_QUESTIONS = ["Write a Python function that reverses the words in a sentence.",
                   "Explain in a paragraph what a hash map is.",
                   "Write a Python class for a stack with push, pop and peek."]
CODE_QUESTIONS = ["Write a short summary of what the code above does.",
                  "Write a Python function that counts the classes defined in the code above.",
                  "Which class above would you test first, and why? One paragraph.",
                  "Rewrite the first function above with clearer names.",
                  "List five possible bugs in the code above.",
                  "Write a unit test for the VerifyCost class above.",
                  "Explain the policy's choice of K above to a new engineer.",
                  "Write a docstring for the Engine class above."]


def pasted_code(runtime: Runtime, tokens: int = 8000) -> str:
    """The first ``tokens`` tokens of this package's engine and models code, as text to paste."""
    package = Path(__file__).resolve().parents[2] / "specdec_tui"
    code = "".join(path.read_text() for folder in ("engine", "models") for path in sorted((package / folder).glob("*.py")))
    tokenizer = runtime.pair.target.tokenizer
    return tokenizer.decode(tokenizer(code)["input_ids"][:tokens])


def chat_answer(runtime: Runtime, messages: list[dict[str, str]], params: DecodeParams) -> tuple[list[int], float, float]:
    """One `hybrid` reply through ``runtime`` as the chat asks for it, with its engine's current table
    and policies: its tokens, its step rate (tokens over its draft and verify seconds, no prefill)
    and its mean rows a pass."""
    seconds, rows, steps, tokens = 0.0, 0, 0, []
    for event in runtime.reply(messages, params, "hybrid"):
        if isinstance(event, StepEvent):
            seconds, rows, steps = seconds + event.record.seconds, rows + event.record.rows, steps + 1
        elif isinstance(event, FinishedEvent):
            tokens = list(event.token_ids)
    return tokens, len(tokens) / seconds, rows / steps


def paired_answers(runtime: Runtime, label: str, messages: list[dict[str, str]], params: DecodeParams, number: int,
                   sides: tuple[str, str], state: Callable[[str], tuple[VerifyCost, dict]]) -> tuple[list[int], float]:
    """Both ``sides``' answers to ``messages`` (old, new), the first side first on even ``number``s,
    each with the table and policies ``state`` gives it; asserted the same tokens, reported. The
    tokens and new / old."""
    results = {}
    for side in sides if number % 2 == 0 else sides[::-1]:
        runtime.engine.decoder.verify_cost, runtime.engine.policies = state(side)
        results[side] = chat_answer(runtime, messages, params)
    (old_tokens, old_rate, old_rows), (new_tokens, new_rate, new_rows) = results[sides[0]], results[sides[1]]
    assert old_tokens == new_tokens, f"{label}: the answers differ"
    print(f"{label}, {len(old_tokens)} tokens; {sides[0]} {old_rate:.1f} tok/s (rows {old_rows:.1f}), "
          f"{sides[1]} {new_rate:.1f} tok/s (rows {new_rows:.1f}); {sides[1]} / {sides[0]} {new_rate / old_rate:.3f}",
          flush=True)
    return old_tokens, new_rate / old_rate


def pasted_after_short_replies(runtime: Runtime, table: VerifyCost) -> tuple[tuple[VerifyCost, dict], str]:
    """The long-context chat's start on ``runtime``: the three short replies, from ``table`` and no
    policies, teach a table and policies (returned); then both caches read the pasted text (returned)
    in a four-token reply with a throwaway copy of them, so that no answer of a pairing pays for that
    reading and it teaches neither side."""
    engine = runtime.engine
    engine.decoder.verify_cost, engine.policies = table, {}
    for question in SHORT_QUESTIONS:
        chat_answer(runtime, [{"role": "user", "content": question}], runtime.params(max_new_tokens=256))
    taught = (engine.decoder.verify_cost, engine.policies)
    engine.decoder.verify_cost, engine.policies = copy.deepcopy(taught)
    pasted = pasted_code(runtime)
    chat_answer(runtime, [{"role": "user", "content": pasted + "\n\nHi."}], runtime.params(max_new_tokens=4))
    return taught, pasted


def code_questions(pasted: str) -> list[list[dict[str, str]]]:
    """Each of ``CODE_QUESTIONS`` after the pasted text, as the chat's messages."""
    return [[{"role": "user", "content": pasted + "\n\n" + question}] for question in CODE_QUESTIONS]


def paired_code_questions(runtime: Runtime, pasted: str, sides: tuple[str, str],
                          state: Callable[[str], tuple[VerifyCost, dict]]) -> list[float]:
    """``paired_answers`` of 256 tokens for each of ``code_questions``: new / old per question."""
    params = runtime.params(max_new_tokens=256)
    return [paired_answers(runtime, f"question {number + 1}", messages, params, number, sides, state)[1]
            for number, messages in enumerate(code_questions(pasted))]


def lean_forward(runner: object) -> FastLlama:
    """The package's forward under a loaded model's runner and whatever wraps it (breaker, checks)."""
    while not isinstance(runner, FastLlama):
        runner = runner.runner
    return runner


def greedy_reply(target: FastLlama, ids: list[int], tokens: int) -> list[int]:
    """``target``'s own greedy reply of ``tokens`` tokens to ``ids``, one pass a token from a fresh cache."""
    target.reset()
    reply = [int(target.forward(ids, 1)[-1].argmax())]
    while len(reply) < tokens:
        reply.append(int(target.forward(reply[-1:], 1)[-1].argmax()))
    return reply


def engine_with(runtime: Runtime, table: type[VerifyCost] | None = None) -> Engine:
    """An engine of its own over ``runtime``'s loaded pair, its verify-cost table a new ``table``
    where one is given (an engine's table learns from every pass it runs)."""
    engine = build_engine(runtime.pair, runtime.settings)[0]
    if table is not None:
        engine.decoder.verify_cost = table()
    return engine


def decoded(engine: Engine, ids: list[int], params: DecodeParams, drafter: Drafter | None) -> FinishedEvent:
    """One reply from fresh caches (target-only where ``drafter`` is None), to its summary."""
    engine.reset()
    for event in engine.decoder.generate(ids, params, drafter):
        if isinstance(event, FinishedEvent):
            return event
    raise RuntimeError("a reply ended without its summary")



def mode_reply(runtime: Runtime, ids: list[int], mode: str) -> FinishedEvent:
    """One reply of ``mode`` on ``runtime``'s own engine, as ``decoded`` (128 new tokens, default settings)."""
    params = runtime.params(max_new_tokens=128)
    return decoded(runtime.engine, ids, params, runtime.engine.drafter(mode, params))


def draft_top(draft: CachedModel, prompt: list[int], reply: list[int], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's ``n`` likeliest ids after each prefix of ``reply`` and its probabilities of them
    (both (len(reply), n)), read in one teacher-forced pass from an empty cache."""
    draft.reset()
    logits = draft.logits_for(prompt + reply[:-1], len(reply))
    top = logits.topk(n, dim=-1).indices
    return top, torch.softmax(logits, -1).gather(-1, top)


def draft_guesses(draft: CachedModel, prompt: list[int], reply: list[int]) -> tuple[list[int], list[int]]:
    """The draft's greedy token and runner-up after each prefix of ``reply`` (``draft_top``)."""
    top = draft_top(draft, prompt, reply, 2)[0]
    return top[:, 0].tolist(), top[:, 1].tolist()


def hybrid_reply(runtime: Runtime, engine: Engine, ids: list[int], name: str) -> Reply:
    """One reply on ``engine``: target-only for "target", else `hybrid`, with the one-row cost its
    verify-cost table holds afterwards."""
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    event = decoded(engine, ids, params, drafter)
    one_row = engine.decoder.verify_cost(1)
    return event.token_ids, event.summary, f"1-row cost {one_row * 1000:.0f} ms" if drafter else ""


def interleaved(runtime: Runtime, variants: Sequence[str], run: Callable[[list[int], str], Reply]) -> Ratios:
    """Each variant's tokens/s over target-only's, per category and prompt; a line per prompt."""
    names = ["target", *variants]
    warm = runtime.prompt_ids([{"role": "user", "content": "Say hi."}])
    for name in names:
        run(warm, name)
    ratios: Ratios = defaultdict(lambda: defaultdict(list))
    for i, item in enumerate(load_suite(default_suite_path())):
        ids = runtime.prompt_ids(item.messages)
        order = names[i % len(names) :] + names[: i % len(names)]
        results = {name: run(ids, name) for name in order}
        target_tokens, target, _ = results["target"]
        line = [item.id, f"target {target.tokens_per_s:.1f}"]
        for name in variants:
            tokens, summary, details = results[name]
            assert tokens == target_tokens, (item.id, name)  # identical to target-only
            ratio = summary.tokens_per_s / target.tokens_per_s
            ratios[item.category][name].append(ratio)
            line.append(f"{name} {ratio:.2f} (acc {summary.acceptance_rate or 0:.2f}, steps {summary.steps}, "
                        f"{details})")
        print(" | ".join(line), flush=True)
    return ratios


def print_paired(ratios: Ratios, pairs: Sequence[tuple[str, str]]) -> None:
    for category, by in ratios.items():
        print(category, "x target, median:", {k: round(statistics.median(v), 3) for k, v in by.items()},
              "lowest:", {k: round(min(v), 3) for k, v in by.items()})
        for a, b in pairs:
            paired = [x / y for x, y in zip(by[a], by[b], strict=True)]
            print(f"  {a} / {b}: paired median {statistics.median(paired):.3f}, min {min(paired):.3f}, "
                  f"max {max(paired):.3f}")


def two_engine_pairs(new: Sequence[str], old: Sequence[str]) -> list[tuple[str, str]]:
    """The ratios a run with up to two engines of each variant prints: the second engine of each
    over its first (the spread between identical engines), then every new engine over every old."""
    return [*zip(new[1:], new[:1]), *zip(old[1:], old[:1]), *((n, o) for n in new for o in old)]

def read_ratios(paths: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Each prompt's ratios to target-only by variant name, as ``interleaved`` printed them (two
    decimals) in the outputs at ``paths``."""
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        with open(path) as output:
            for line in output:
                if " | target " in line:
                    for name, ratio in re.findall(r"\| (\S+) ([\d.]+) \(", line):
                        ratios[line.split(" | ")[0]][name].append(float(ratio))
    return ratios


def combine(paths: Sequence[str], new: str = "WX", old: str = "AB") -> None:
    """Per category, the median over prompts of (mean of the ``new`` variants' ratios) / (mean of the
    ``old`` ones'), read from the outputs of runs with two engines of each (one letter a variant)."""
    ratios = read_ratios(paths)
    for category in ("gen-", "edit-", "prose-"):
        paired = [statistics.mean(v for name in new for v in by.get(name, []))
                  / statistics.mean(v for name in old for v in by.get(name, []))
                  for prompt, by in ratios.items() if prompt.startswith(category)]
        print(f"{category} new / old: paired median {statistics.median(paired):.3f}, min {min(paired):.3f}, "
              f"max {max(paired):.3f}")


def pass_times(target: FastLlama, context: int, rows: Sequence[int], variants: dict[str, Callable[[], object]],
               rounds: int) -> dict[tuple[int, str], float]:
    """Seconds of ``target``'s whole pass over each of ``rows`` rows after ``context`` tokens, under
    each variant (a call that sets it up), the variants in turn per row count, their order rotating
    from round to round: the median of ``rounds`` rounds less the first two."""
    names = list(variants)
    target.reset()
    target.forward(list(range(1000, 1000 + context)), 1)
    times: dict[tuple[int, str], list[float]] = defaultdict(list)
    for round_ in range(rounds):
        for m in rows:
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                variants[name]()
                start = time.perf_counter()
                target.forward(list(range(2000, 2000 + m)), m)
                times[m, name].append(time.perf_counter() - start)
                target.crop(context)
    return {key: statistics.median(seconds[2:]) for key, seconds in times.items()}


def print_pass_times(times: dict[tuple[int, str], float], context: int, baseline: str) -> None:
    """A line per row count: each variant's pass in ms and over the ``baseline`` variant's."""
    for m in sorted({m for m, _ in times}):
        base = times[m, baseline]
        cells = [f"{name} {seconds * 1000:.1f} ms ({seconds / base:.3f})"
                 for (rows, name), seconds in times.items() if rows == m]
        print(f"{m} rows after {context}: " + ", ".join(cells), flush=True)
