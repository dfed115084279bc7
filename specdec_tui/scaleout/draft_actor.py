"""The draft model in its own Ray actor, beside its replica in the replica's placement group.

The replica's engine sees a ``RemoteRunner``: every draft pass (a token, or a prompt read) is one
actor call that returns the logits, so the split costs a round trip and a copy of the logits per
drafted token. ``specdec-serve --ray --draft-actor`` turns it on; by default the draft runs in the
replica, which measured faster (see docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import ray
import torch

from specdec_tui.config import Settings
from specdec_tui.models.loader import LoadedModel

#: Loads the draft model the settings name (the tests pass one that builds a tiny draft).
DraftFactory = Callable[[Settings], LoadedModel]


def load_draft(settings: Settings) -> LoadedModel:
    from specdec_tui.models.cache import ModelCache
    from specdec_tui.models.loader import load_model, resolve_device

    models = settings.models
    assert models.draft is not None
    return load_model(models.draft, precision=models.draft_precision, device=resolve_device(models.device),
                      cache=ModelCache(models.cache_dir), role="draft", head_tokens=models.draft_head_tokens)


@dataclass(frozen=True)
class DraftCard:
    """What the replica needs to know of the remote draft model to build its engine around it."""

    name: str
    input_vocab: int
    precision: str
    max_context: int
    eos_ids: frozenset[int]
    vocab_size: int
    source: str


class DraftActor:
    """Holds the draft model and its KV cache; the replica drives it pass by pass."""

    def __init__(self, settings: Settings, make_draft: DraftFactory | None, threads: int) -> None:
        torch.set_num_threads(threads)
        self.draft = (make_draft or load_draft)(settings)

    def card(self) -> DraftCard:
        d = self.draft
        return DraftCard(d.name, d.runner.input_vocab, d.precision, d.max_context, d.eos_ids, d.vocab_size, d.source)

    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        return self.draft.runner.forward(ids, n_logits)

    def crop(self, length: int) -> None:
        self.draft.runner.crop(length)

    def reset(self) -> None:
        self.draft.runner.reset()


class RemoteRunner:
    """A runner whose model lives in a ``DraftActor``: each call waits for the actor."""

    def __init__(self, actor: ray.actor.ActorHandle, input_vocab: int) -> None:
        self.actor = actor
        self.input_vocab = input_vocab

    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        return ray.get(self.actor.forward.remote(ids, n_logits))

    def crop(self, length: int) -> None:
        ray.get(self.actor.crop.remote(length))

    def reset(self) -> None:
        ray.get(self.actor.reset.remote())


def start_draft_actor(settings: Settings, make_draft: DraftFactory | None, like: LoadedModel) -> LoadedModel:
    """The draft model, loaded in an actor in this replica's placement group, as the engine sees it.

    ``like`` is the target: the draft shares its tokenizer (the actor checks nothing it cannot see).
    """
    from ray.util import get_current_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cpus = settings.ray.draft_cpus
    group = get_current_placement_group()
    strategy = (PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=1) if group is not None
                else None)
    actor = ray.remote(DraftActor).options(num_cpus=cpus, scheduling_strategy=strategy).remote(
        settings, make_draft, max(1, round(cpus)))
    card: DraftCard = ray.get(actor.card.remote())
    return replace(like, name=card.name, model=None, runner=RemoteRunner(actor, card.input_vocab),
                   precision=card.precision, max_context=card.max_context, eos_ids=card.eos_ids,
                   vocab_size=card.vocab_size, role="draft", source=card.source)
