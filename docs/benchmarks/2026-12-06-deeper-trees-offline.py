"""Two larger draft trees than `hybrid`'s, offline: what they could keep and what their rows cost
(this folder's README, "Deeper and wider trees, offline").

`hybrid` offers one branch at a position where the draft doubted: its runner-up, one token, one
more verify row. The speed issue names two larger trees:

- wider: the draft's third choice too at such a position (one more row);
- deeper: after a branch, the draft's own next token (a second row on the branch's path). Where the
  draft goes on past the branch's position, that token comes from the draft pass it runs anyway
  (the branch as one more row of it); where the branch is at the draft's last token, it costs a
  draft pass of its own.

Per prompt, target-only's reply is decoded, then one teacher-forced pass of the draft over prompt
and reply gives, at each position, the draft's three likeliest ids and its probability of the
first: how often the target's token is the first, second or third choice, by that confidence.
Then `hybrid` decodes the prompt (checked identical to target-only) with each step's draft and
verdict logged: for each branch the target kept, whether the draft's greedy token after the branch
(the teacher-forced pass again) is the target's next token, which a deeper tree would have kept
too, and whether the branch was at the draft's last token or before it.

A pass over M rows and a draft token cost what `specdec-bench steps` measures on this host after
160 tokens (in one-row target passes: v(M) and c). Each logged step costs c per modelled token plus
v(rows); over a category that gives the tokens a one-row pass's time buys, which any extra row must
match to pay. The script prints, per category, what each larger tree keeps and what its rows cost,
in those units: a best case, since it counts every kept continuation and the rows only where
branches were offered (a policy placing the extra rows only where they pay can do no better
than keeping all these tokens for these rows' cost).

Run: .venv/bin/python docs/benchmarks/2026-12-06-deeper-trees-offline.py
Output of 2026-12-06 (the Xeon with AVX-512 VNNI) beside this file: 2026-12-06-deeper-trees-offline.txt
"""

from __future__ import annotations

from collections import Counter, defaultdict

from paired_levers import decoded, draft_top, mode_reply

from specdec_tui.bench.steps import measure
from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.runtime import load_runtime

CONTEXT = 160
ROWS = range(1, 12)
BINS = 5


def main() -> None:
    runtime = load_runtime(Settings())
    params = runtime.params(max_new_tokens=128)
    costs = measure(runtime.pair, [CONTEXT], ROWS)
    c = costs.c(CONTEXT)
    v = {m: costs.v(CONTEXT, m) for m in ROWS}
    extra_row = (v[6] - v[2]) / 4  # the rows a prose pass has: a row's share of the curve there
    print(f"after {CONTEXT} tokens: a draft token c = {c:.3f}, v(M) for M = 1..{ROWS[-1]}: "
          + " ".join(f"{v[m]:.2f}" for m in ROWS) + f"; a row at 2-6 rows {extra_row:.3f}")

    decoder, draft = runtime.engine.decoder, CachedModel(runtime.pair.draft.runner)
    logged: list[tuple[int, object, int, list[int]]] = []
    drafter = runtime.engine.drafter("hybrid", params)
    step = decoder.step

    def logging_step(context, block, room, step_params, sampler, draft_s):
        result = step(context, block, room, step_params, sampler, draft_s)
        logged.append((len(context), result[3], drafter.modelled, [j for j, _ in block.branches]))
        return result

    decoder.step = logging_step
    ranks: dict[str, Counter] = defaultdict(Counter)
    counts: dict[str, Counter] = defaultdict(Counter)
    units: dict[str, float] = defaultdict(float)
    mode_reply(runtime, runtime.prompt_ids([{"role": "user", "content": "Say hi."}]), "hybrid")  # warm
    for item in load_suite(default_suite_path()):
        prompt = list(runtime.prompt_ids(item.messages))
        reply = list(mode_reply(runtime, prompt, "target").token_ids)
        top, confidence = draft_top(draft, prompt, reply + [reply[-1]], 3)  # one row past the reply's end
        for i, token in enumerate(reply):
            rank = next((r for r in range(3) if int(top[i, r]) == token), 3)
            ranks[item.category][min(int(float(confidence[i, 0]) * BINS), BINS - 1), rank] += 1
        logged.clear()
        drafter = runtime.engine.drafter("hybrid", params)
        hybrid = decoded(runtime.engine, prompt, params, drafter)
        assert list(hybrid.token_ids) == reply, item.id
        found = counts[item.category]
        found["tokens"] += len(reply)
        for fed, record, modelled, branched in logged:
            units[item.category] += modelled * c + v[min(record.rows, ROWS[-1])]
            found["steps"] += 1
            found["branches"] += record.branches
            found["offered at the last token"] += sum(j >= modelled - 1 for j in branched)
            found["offered before it"] += sum(j < modelled - 1 for j in branched)
            if not record.branch_kept:
                continue
            at = record.accepted - 1  # the kept branch's index in the draft, its position in the reply:
            position = fed - len(prompt) + at
            last = at >= modelled - 1  # as the offered branches are counted
            agrees = position + 1 < len(reply) and int(top[position + 1, 0]) == reply[position + 1]
            found["kept at the last token" if last else "kept before it"] += 1
            found["kept at the last token, next agrees" if last else "kept before it, next agrees"] += agrees
        print(item.id, dict(found), flush=True)

    for category, found in counts.items():
        rate = found["tokens"] / units[category]
        print(f"\n{category}: {found['tokens']} tokens in {found['steps']} steps, {units[category]:.0f} one-row passes' "
              f"time, {rate:.2f} tokens a one-row pass; {found['branches']} branches offered, "
              f"{found['kept at the last token'] + found['kept before it']} kept")
        by = ranks[category]
        for b in range(BINS):
            n = sum(by[b, r] for r in range(4))
            if n:
                third = by[b, 2] / n
                print(f"  draft sure {b / BINS:.1f}-{(b + 1) / BINS:.1f}: {n:4d} positions, the target's token its "
                      f"first {by[b, 0] / n:.2f}, second {by[b, 1] / n:.2f}, third {third:.2f}, none {by[b, 3] / n:.2f};"
                      f" a third-choice row keeps at most {third / extra_row:.2f} tokens a one-row pass")
        for where, cost in (("before it", extra_row), ("at the last token", extra_row + c)):
            offered, kept = found[f"offered {where}"], found[f"kept {where}"]
            agree = found[f"kept {where}, next agrees"]
            print(f"  deeper, branches {where}: {offered} offered, {kept} kept, the draft's next token kept after "
                  f"{agree} (+{agree / found['tokens']:.1%} tokens); its row on every offered branch's path costs "
                  f"{offered * cost / units[category]:.1%} of the time, so {agree / max(offered * cost, 1e-9):.2f} "
                  "tokens a one-row pass")


if __name__ == "__main__":
    main()
