"""Turning a conversation into prompt token ids through the model's chat template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from transformers import PreTrainedTokenizerBase

ROLE_LABELS = {"system": "System", "user": "User", "assistant": "Assistant"}


def render_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids that ask the model for the next assistant message.

    Models without a chat template (base models such as GPT-2) get a plain transcript.
    """
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    if tokenizer.chat_template:
        return list(
            tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    transcript = "".join(f"{ROLE_LABELS.get(m['role'], m['role'])}: {m['content']}\n\n" for m in chat)
    return tokenizer.encode(transcript + "Assistant:")
