"""A memory budget for a loaded pair: before a reply could take the process past it, the target lets
its int8 blocks go, and once they are gone, the draft keeps its keys and values in float16.

A target packed from a GGUF's Q4_K tensors holds those linears two ways with the same numbers: int8
blocks, which calls of four rows or more read, and 4-bit indices, which shorter calls read (on AVX-512
VNNI). Both are resident once a reply has run (about 2.9 GB for the default pair), and every position
of context adds its keys and values (82 KB for the default pair in float32). When a reply's prompt and
longest answer would take the process past the budget, the target drops blocks and hands their
pages back (``FastLlama.drop_int8_blocks``), as many linears' as the reply needs: their later calls read
the indices, the replies stay the same token for token, and passes of four rows or more get slower,
up to what ``lean_target`` makes them from the start once every block is gone. It is checked between
replies, never inside one.

Where that is not enough (every block gone, or a processor without AVX-512 VNNI, whose target reads
only its blocks), the draft's cache is narrowed to float16 in place (``FastLlama.convert_kv_to``): half
the draft's share of each position, and the replies stay the target's, since the draft only proposes.
It stays float16 for the rest of the process.

When a conversation gets shorter (a new chat after a long one), the caches hand back the pages of the
positions past it, and the target takes back as many of the blocks it dropped as fit under the budget
with some slack (``FastLlama.take_int8_blocks_back``: blocks a mapped file holds, which it pages in
again). A lean target's blocks, dropped at its load, never come back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specdec_tui.models import quantized_kernels
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.models.loader import ModelPair
from specdec_tui.models.memory import resident_bytes

GB = 1e9
#: What a reply takes besides its keys and values: a prompt pass's activations (``PROMPT_ROWS`` rows),
#: the step records, the allocator's slack. The default pair's replies took 0.02-0.09 GB of it.
REPLY_HEADROOM = int(0.1 * GB)
#: Room left under the budget after taking blocks back: a new chat's next few replies grow the caches
#: (about 25 MB for a 300-token turn of the default pair) without dropping them again at once.
TAKE_BACK_SLACK = int(0.1 * GB)


@dataclass
class MemoryBudget:
    """Keeps the process under ``limit`` bytes as far as dropping ``target``'s int8 blocks (where
    ``drops_blocks``) and narrowing ``draft``'s cache can. ``models``: every model whose cache grows with
    the context (the target and the draft)."""

    limit: int
    target: FastLlama
    models: tuple[FastLlama, ...]
    draft: FastLlama | None = None
    drops_blocks: bool = True
    resident: Callable[[], int | None] = resident_bytes
    #: Whether the blocks are resident: mapped from a packed file, not until a pass of four rows or more
    #: has read them (every pass, where they cannot be dropped); packed in this process (a first start),
    #: from the start.
    blocks_read: bool = False
    #: The most positions the draft's cache holds of a context (a draft reading a window of a long
    #: one holds fewer); None: all of them.
    draft_positions: Callable[[int], int] | None = None
    #: What the budget last dropped and why (one line), once it has.
    note: str | None = field(default=None, init=False)

    @classmethod
    def for_pair(cls, pair: ModelPair, limit_gb: float,
                 draft_positions: Callable[[int], int] | None = None) -> MemoryBudget | None:
        """The budget of ``limit_gb`` GB for ``pair``, or None where it could do nothing: no budget (0), a
        target not of the package's forward, or neither int8 blocks it can drop (it has none, or the
        processor needs them: no AVX-512 VNNI) nor a draft whose cache is float32. ``draft_positions``:
        the most positions the draft's cache holds of a context, where fewer than all."""
        target = pair.target.runner
        if limit_gb <= 0 or not isinstance(target, FastLlama):
            return None
        drops_blocks = bool(target.int8_block_bytes) and quantized_kernels.reads_indices()
        draft = pair.draft.runner if pair.draft is not None else None
        draft = draft if isinstance(draft, FastLlama) else None
        if not drops_blocks and (draft is None or draft.cache.dtype != torch.float32):
            return None
        models = (target, draft) if draft is not None else (target,)
        # Where the blocks are all a pass reads, the load's warm-up pass has read them.
        blocks_read = not target.int8_blocks_mapped or not drops_blocks
        return cls(int(limit_gb * GB), target, models, draft, drops_blocks, blocks_read=blocks_read,
                   draft_positions=draft_positions)

    def positions(self, model: FastLlama, context: int) -> int:
        """The positions ``model``'s cache holds of a context of ``context`` tokens."""
        if model is self.draft and self.draft_positions is not None:
            return self.draft_positions(context)
        return context

    def growth(self, context: int) -> int:
        """The bytes the caches add before they hold ``context`` positions."""
        return sum(model.cache.position_bytes * max(0, self.positions(model, context) - model.cache.written)
                   for model in self.models)

    def projected(self, context: int) -> int | None:
        """The resident memory a reply whose context ends at ``context`` positions could reach: what is
        resident now, the blocks where no reply has read them yet, the caches' growth and the reply's
        headroom."""
        now = self.resident()
        if now is None:
            return None
        unread = 0 if self.blocks_read else self.target.int8_block_bytes
        return now + unread + self.growth(context) + REPLY_HEADROOM

    def before_reply(self, context: int) -> str | None:
        """Keep a reply whose context ends at ``context`` positions under the limit: drop as many of the
        target's int8 blocks as that needs, and past them narrow the draft's cache; or, where the caches'
        pages past the conversation went back, take back as many dropped blocks as fit. The one-line note
        saying what it did, else None."""
        released = sum(model.release_cache_past(self.positions(model, context)) for model in self.models)
        held, projected = self.target.int8_block_bytes, self.projected(context)
        self.blocks_read = True
        if projected is None:
            return None
        if projected > self.limit:
            notes = []
            if self.drops_blocks and held:
                notes.append(self._drop(context, projected - self.limit))
                projected -= held - self.target.int8_block_bytes
            if projected > self.limit and self.draft is not None and self.draft.cache.dtype == torch.float32:
                notes.append(self._narrow_draft(context))
            if not notes:
                return None
            self.note = "; ".join(notes[:1] + [note.removeprefix("memory: ") for note in notes[1:]])
            return self.note
        if released and self.drops_blocks and self.target.released_int8_block_bytes:
            taken = self._take_back(context, self.limit - TAKE_BACK_SLACK - projected)
            self.note = taken or self.note
            return taken
        return None

    def _drop(self, context: int, needed: int) -> str:
        held, now = self.target.int8_block_bytes, self.resident() or 0
        dropped = self.target.drop_int8_blocks(at_least=needed)
        left = self.target.int8_block_bytes
        after = self.resident() or now
        return (f"memory: to keep a context of {context} tokens under the {self.limit / GB:.1f} GB budget, "
                f"{dropped} more of the target's linears read only their 4-bit indices ({(held - left) / GB:.2f} "
                f"GB of int8 blocks let go, {left / GB:.2f} GB kept; resident {now / GB:.2f} -> {after / GB:.2f} "
                "GB; the same replies, slower long passes)")

    def _narrow_draft(self, context: int) -> str:
        assert self.draft is not None
        now = self.resident() or 0
        self.draft.convert_kv_to(torch.float16)
        after = self.resident() or now
        return (f"memory: to keep a context of {context} tokens under the {self.limit / GB:.1f} GB budget, the "
                f"draft keeps its keys and values in float16 from now on (resident {now / GB:.2f} -> {after / GB:.2f} "
                "GB; the same replies)")

    def _take_back(self, context: int, room: int) -> str | None:
        held = self.target.int8_block_bytes
        taken = self.target.take_int8_blocks_back(at_most=room)
        if not taken:
            return None
        return (f"memory: a context of {context} tokens leaves room under the {self.limit / GB:.1f} GB budget, so "
                f"{taken} of the target's linears read their int8 blocks again ({held / GB:.2f} -> "
                f"{self.target.int8_block_bytes / GB:.2f} GB held, {self.target.released_int8_block_bytes / GB:.2f} "
                "GB still let go)")
