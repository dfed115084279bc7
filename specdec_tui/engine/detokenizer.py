"""Turns a stream of token ids into text pieces, one per token, without splitting characters."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


class IncrementalDetokenizer:
    """Text of each pushed token given the tokens before it.

    Decoding only a short window around the newest tokens keeps this linear in the reply length;
    a token that ends inside a multi-byte character yields "" until the character completes.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token: int) -> str:
        self.ids.append(token)
        seen = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        if text.endswith("\ufffd") or len(text) <= len(seen):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return text[len(seen) :]
