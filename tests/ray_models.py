"""What a test's Ray replicas load: the tiny pair, built in the replica's own process.

Ray ships these functions to the replicas by reference, so the test cluster puts this folder on
the workers' PYTHONPATH. The tiny models are seeded: every replica, and the test process, build
the same weights, so their greedy replies are the same.
"""

from __future__ import annotations

from dataclasses import replace

from tiny import SlowRunner, tiny_pair

from specdec_tui.config import Settings
from specdec_tui.models.loader import LoadedModel, ModelPair


def endless(model: LoadedModel) -> LoadedModel:
    """``model`` with no end-of-sequence token: every reply runs to its length limit."""
    return replace(model, eos_ids=frozenset())


def tiny_replica_pair(settings: Settings, delay: float = 0.0) -> ModelPair:
    """The tiny pair (target only when the settings name no draft); each target pass takes ``delay`` s."""
    pair = tiny_pair()
    target = endless(pair.target)
    if delay:
        target = replace(target, runner=SlowRunner(target.runner, delay))
    return ModelPair(target, endless(pair.draft) if settings.models.draft is not None and pair.draft else None)


def tiny_draft(settings: Settings) -> LoadedModel:
    draft = tiny_pair().draft
    assert draft is not None
    return endless(draft)
