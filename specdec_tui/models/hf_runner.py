"""Running any transformers causal LM as a runner: its own forward and a ``DynamicCache``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class HFRunner:
    """Any transformers causal LM, through its own forward and a ``DynamicCache``."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.input_vocab = model.get_input_embeddings().num_embeddings
        self.cache = DynamicCache(config=model.config)

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)

    def crop(self, length: int) -> None:
        extra = self.cache.get_seq_length() - length
        if extra > 0:
            self.cache.crop(-extra)

    @torch.inference_mode()
    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=n_logits)
        return out.logits[0, -n_logits:].float().cpu()
