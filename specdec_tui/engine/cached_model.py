"""A causal LM together with its KV cache and the token ids that cache holds.

Rollback is implicit: every call names the whole sequence it wants scored, the cache is cropped to
the longest prefix it shares with that sequence, and only the rest is fed. After a rejected draft
the next call simply no longer contains the rejected tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


class CachedModel:
    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.ids = []

    def _sync(self, ids: Sequence[int], keep_at_most: int) -> list[int]:
        """Crop the cache to what it shares with ``ids`` (at most ``keep_at_most``); return the rest."""
        keep = min(common_prefix_length(self.ids, ids), keep_at_most)
        if keep < len(self.ids):
            self.cache.crop(keep - len(self.ids))
            del self.ids[keep:]
        return list(ids[keep:])

    @torch.inference_mode()
    def _forward(self, new: list[int], n_logits: int) -> torch.Tensor:
        input_ids = torch.tensor([new], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=n_logits
        )
        self.ids.extend(new)
        return out.logits[0, -n_logits:].float().cpu()

    def prefill(self, ids: Sequence[int]) -> None:
        """Make the cache hold exactly ``ids``."""
        new = self._sync(ids, len(ids))
        if new:
            self._forward(new, 1)

    def logits_for(self, ids: Sequence[int], n: int) -> torch.Tensor:
        """Next-token logits (n, vocab) after each of the last ``n`` positions of ``ids``."""
        new = self._sync(ids, len(ids) - n)
        return self._forward(new, n)
