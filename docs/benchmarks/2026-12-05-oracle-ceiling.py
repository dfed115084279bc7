"""What this pair allows on this host: `hybrid`'s steps with an oracle for a policy (this folder's
README, "What the pair allows").

Every step of `hybrid` chooses how much to draft, copy and branch before it knows which of those
tokens the target keeps. An oracle knows: at each position of the target's own greedy reply to
every prompt (decoded here by target-only, since on long prompts the reply can differ from one
host's kernels to another's), the draft's greedy token and its runner-up (one
teacher-forced pass of the draft over prompt and reply) and the strict lookup's copy (3- and 4-gram
matches, up to `lookup_k` tokens) say what each choice would keep. The oracle then takes, over the
whole reply, the cheapest sequence of steps (dynamic programming from the reply's end), each one of:

- a target step alone: one token, one one-row pass;
- a copy cut to what the target keeps, m tokens: m + 1 tokens for a pass over m + 1 rows;
- a model draft of n tokens the target keeps (n up to K and to the draft's run of agreement), then
  as much of the copy after the draft as the target keeps (m'): n + m' + 1 tokens for n draft
  tokens and a pass over n + m' + 1 rows;
- a model draft that runs one token past its agreement with a branch there, where the draft's
  runner-up is the target's token: n + 2 tokens for n + 1 draft tokens and n + 3 rows.

A pass's and a draft token's costs are this host's, measured in the script with
`specdec-bench steps`'s own timing after 160 tokens (a pass over M rows costing no more than the
cheapest measured over more, as the engine's own table has it); both prompt passes are timed on
each prompt (the median of three after one untimed). Beside the oracle, the engine's own `hybrid` decodes each
prompt right after target-only (fresh caches, default settings; each reply checked against
target-only's and the result printed). Target-only, for the ratios, is its prompt pass and a
one-row pass a token. It prints, per category, the speedup over target-only of the
oracle and of `hybrid`, for the steps alone (both prompt passes left out) and for the whole reply.
The oracle is not the engine's policy: it bounds what any policy choosing among those steps can
reach with this draft, this lookup and these passes.

Run: .venv/bin/python docs/benchmarks/2026-12-05-oracle-ceiling.py [PROMPTS.jsonl]
The outputs of 2026-12-05 beside this file: on a host with AVX-512 VNNI, 2026-12-05-oracle-ceiling.txt
(the suite) and 2026-12-05-oracle-ceiling-held-out.txt (2026-12-05-held-out-prompts.jsonl); on
the AVX2 host, made by this script's first version (the oracle alone, the suite's replies read from
2026-12-04-target-replies.json), 2026-12-05-oracle-ceiling-avx2.txt and
2026-12-05-oracle-ceiling-held-out-avx2.txt. On the Zen 4 EPYC (2026-12-07): 2026-12-07-oracle-ceiling-zen4.txt and
2026-12-07-oracle-ceiling-held-out-zen4.txt.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from paired_levers import draft_guesses, mode_reply

from specdec_tui.bench.steps import measure
from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import CachedModel, common_prefix_length
from specdec_tui.engine.drafters import PromptLookupDrafter
from specdec_tui.runtime import load_runtime

CONTEXT = 160
ROWS = range(1, 18)


def kept_copies(lookup: PromptLookupDrafter, prompt: list[int], reply: list[int], span: int) -> list[int]:
    """How many tokens of the strict lookup's copy at each position the target keeps."""
    return [common_prefix_length(lookup.continuation(prompt + reply[:i], span), reply[i:]) for i in range(len(reply))]


def oracle_cost(reply: list[int], best: list[int], runner_up: list[int], copies: list[int],
                k: int, c: float, v: Callable[[int], float]) -> float:
    """The least cost, in one-row target passes, of steps that produce ``reply`` (see the docstring)."""
    n_tokens = len(reply)
    run = [0] * (n_tokens + 1)
    for i in reversed(range(n_tokens)):
        run[i] = run[i + 1] + 1 if best[i] == reply[i] else 0
    cost = [0.0] * (n_tokens + 1)
    for i in reversed(range(n_tokens)):
        def then(tokens: int, i: int = i) -> float:
            return cost[min(i + tokens, n_tokens)]

        options = [1.0 + then(1)]
        if copies[i]:
            options.append(v(copies[i] + 1) + then(copies[i] + 1))
        for n in range(1, min(run[i], k) + 1):
            copied = copies[i + n] if i + n < n_tokens else 0
            options.append(n * c + v(n + copied + 1) + then(n + copied + 1))
        n = run[i]
        if n < k and i + n < n_tokens and runner_up[i + n] == reply[i + n]:
            options.append((n + 1) * c + v(n + 3) + then(n + 2))
        cost[i] = min(options)
    return cost[0]


def prompt_seconds(model: CachedModel, prompt: list[int]) -> float:
    times = []
    for _ in range(4):
        model.reset()
        started = time.perf_counter()
        model.prefill(prompt[:-1])
        times.append(time.perf_counter() - started)
    model.reset()
    return statistics.median(times[1:])


def line(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}, {max(values):.2f})"


def main() -> None:
    runtime = load_runtime(Settings())
    prompts = load_suite(Path(sys.argv[1]) if len(sys.argv) > 1 else default_suite_path())
    params = runtime.params()
    costs = measure(runtime.pair, [CONTEXT], ROWS)
    one_row, c = costs.target[CONTEXT, 1], costs.c(CONTEXT)
    measured = [costs.v(CONTEXT, m) for m in ROWS]
    curve = [min(measured[i:]) for i in range(len(measured))]
    print(f"one-row target pass after {CONTEXT} tokens {one_row * 1000:.1f} ms, draft token c = {c:.3f}, "
          "v(M) for M = 1..17: " + " ".join(f"{x:.2f}" for x in measured) + "; as used: " +
          " ".join(f"{x:.2f}" for x in curve))

    def v(rows: int) -> float:
        return curve[min(rows, ROWS[-1]) - 1]

    target, draft = CachedModel(runtime.pair.target.runner), CachedModel(runtime.pair.draft.runner)
    lookup = PromptLookupDrafter(min_ngram=3, span=params.lookup_k)
    mode_reply(runtime, runtime.prompt_ids([{"role": "user", "content": "Say hi."}]), "hybrid")  # warm
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for item in prompts:
        prompt = list(runtime.prompt_ids(item.messages))
        reply = list(mode_reply(runtime, prompt, "target").token_ids)
        hybrid = mode_reply(runtime, prompt, "hybrid")
        hybrid_reply, seconds = list(hybrid.token_ids), hybrid.summary.seconds
        differs = common_prefix_length(hybrid_reply, reply)
        identity = "identical" if hybrid_reply == reply else f"NOT identical from token {differs}"
        best, runner_up = draft_guesses(draft, prompt, reply)
        copies = kept_copies(lookup, prompt, reply, params.lookup_k)
        oracle = oracle_cost(reply, best, runner_up, copies, params.k, c, v)
        target_prompt, draft_prompt = prompt_seconds(target, prompt), prompt_seconds(draft, prompt)
        target_only = target_prompt + len(reply) * one_row
        found = {
            "oracle, steps": len(reply) / oracle,
            "oracle, whole reply": target_only / (target_prompt + draft_prompt + oracle * one_row),
            "hybrid, steps": len(reply) * one_row / (seconds - target_prompt - draft_prompt),
            "hybrid, whole reply": target_only / seconds,
        }
        for name, ratio in found.items():
            ratios[item.category][name].append(ratio)
        agreed = statistics.fmean(b == t for b, t in zip(best, reply, strict=True))
        print(f"{item.id}: {len(prompt)} prompt / {len(reply)} reply tokens, draft agrees {agreed:.2f}, "
              f"prompt passes {target_prompt:.2f} / {draft_prompt:.2f} s, oracle {oracle:.1f} one-row passes, "
              f"hybrid {seconds:.2f} s, {identity}; " + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in found.items()),
              flush=True)
    print("\nspeedup over target-only (its prompt pass and a one-row pass a token), median per prompt (lowest, highest)")
    for category, by in sorted(ratios.items()):
        print(f"  {category}: " + "; ".join(f"{name} {line(values)}" for name, values in by.items()))


if __name__ == "__main__":
    main()
