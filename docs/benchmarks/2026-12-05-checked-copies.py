"""The paired lever run for copies checked by the draft model before the target verifies them (this
folder's README, "Copies checked by the draft model, paired (not kept)").

Offline, on the target's greedy replies to the suite (`2026-12-05-copy-check-offline.py`), the
strict lookup's copy and the draft model's greedy token part at a copy's first token at 95 of 578
copy positions in code editing, and there the draft model was the target's token 91 times, the copy
once. So variant C has the draft model read each copy in one pass before it is verified and cuts
the copy where the model's own greedy token parts from it, the model's token taking the place of
the rest (nothing left: the model drafts as it would without a copy). Variant F checks only a copy's
first token, with the draft model's next token (one row), and drops the copy where they differ. A
is `hybrid` as it is: copies verified as the lookup found them. Interleaved per prompt in one
process (the order rotating from prompt to prompt), all 28 prompts, greedy, 128 new tokens, fresh
caches, default settings, each variant and target-only with an engine of its own over the one
loaded pair; every reply is asserted equal to target-only's.

Run: .venv/bin/python docs/benchmarks/2026-12-05-checked-copies.py A C F
The output of 2026-12-05 is 2026-12-05-checked-copies.txt beside this file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from paired_levers import Reply, decoded, engine_with, interleaved, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine.acceptance import first_argmax
from specdec_tui.engine.cached_model import common_prefix_length
from specdec_tui.engine.drafters import Draft, HybridDrafter, Sampler
from specdec_tui.runtime import load_runtime


class CheckedCopies(HybridDrafter):
    """`hybrid` with each greedy copy cut where the draft model's own greedy token parts from it."""

    def check(self, context: Sequence[int], copy: Draft) -> Draft:
        model = self.model
        logits = model.model.logits_for(model._embeddable([*context, *copy.tokens[:-1]]), len(copy.tokens))
        guesses = [int(first_argmax(model._align(row))) for row in logits]
        agreed = common_prefix_length(guesses, copy.tokens)
        return Draft([*copy.tokens[:agreed], *guesses[agreed : agreed + 1]] if agreed else [], source=copy.source)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        self.modelled, self.copied = 0, 0
        draft = self.lookup.propose(context, k, sampler)
        if draft.tokens and sampler.greedy:
            draft = self.check(context, draft)
        if draft.tokens:
            return draft
        draft = self.model.propose(context, k, sampler)
        self.modelled = len(draft.tokens)
        return self._with_copy(context, draft, k)


class FirstTokenChecked(CheckedCopies):
    """Only a copy's first token checked, against the draft model's next token (one row)."""

    def check(self, context: Sequence[int], copy: Draft) -> Draft:
        model = self.model
        guess = int(first_argmax(model._align(model.model.logits_for(model._embeddable(context), 1)[0])))
        return copy if guess == copy.tokens[0] else Draft([], source=copy.source)


VARIANTS = sys.argv[1:] or ["A", "C", "F"]
CHECKS = {"C": CheckedCopies, "F": FirstTokenChecked}
runtime = load_runtime(Settings())
# Target-only gets an engine of its own too: an engine's verify-cost table learns from every pass.
engines = {name: engine_with(runtime) for name in ["target", *VARIANTS]}


def run(ids: list[int], name: str) -> Reply:
    engine, params = engines[name], runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    if isinstance(drafter, HybridDrafter) and name in CHECKS:
        drafter = CHECKS[name](drafter.lookup, drafter.model, drafter.copy_policy)
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, f"{event.summary.drafted} drafted" if drafter else ""


print_paired(interleaved(runtime, VARIANTS, run), [(new, "A") for new in VARIANTS if new != "A"])
