"""Identity watched bit by bit: each prompt's target-only reply decoded twice, around `hybrid` and
llama.cpp's modes, every target pass fingerprinted (this folder's README, "Identity, bit by bit").

A reply that parts from another at a near tie shows only where a difference flips a token; this
script looks below that. In the bench's order per prompt (target-only, `hybrid`, with ``llama``
the three llama.cpp modes) plus a second target-only reply, one process, fresh caches each reply,
128 new tokens, it keeps for each target-only reply a hash of every pass's logits and of the keys
and values each pass wrote in each layer, and after each of our replies each layer's whole
cache over the positions that hold the reply's tokens. It prints where the two target-only replies and
`hybrid` first differ as tokens, the first pass (and its first layer) whose bits parted between the
two target-only replies, and whether `hybrid`'s and the second target-only reply's caches equal the
first target-only reply's bit for bit: `hybrid` computes those keys and values in verify passes of
several rows, target-only in one-row steps, so this is the verify-equals-single-steps property
checked on a real reply, every layer.

Run: .venv/bin/python docs/benchmarks/2026-12-05-identity-recorder.py llama [PROMPTS.jsonl]
     .venv/bin/python docs/benchmarks/2026-12-05-identity-recorder.py ours [PROMPTS.jsonl]   # without llama.cpp
     .venv/bin/python docs/benchmarks/2026-12-05-identity-recorder.py targets-first [PROMPTS.jsonl]
``targets-first`` decodes every prompt's first target-only reply before any other (the order of the
two processes that morning whose first replies parted), then each prompt's `hybrid` and second
target-only reply, without llama.cpp.
PROMPTS defaults to the bench's suite. The outputs of 2026-12-05 (the Xeon with AVX-512 VNNI) are
2026-12-05-identity-recorder.txt beside this file.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from paired_levers import lean_forward

from specdec_tui.bench.llama_cpp import LLAMA_MODES
from specdec_tui.bench.modes import run_mode
from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import common_prefix_length
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.runtime import load_runtime
from specdec_tui.tui.widgets.compare_view import first_difference


def digest(tensor: torch.Tensor) -> str:
    return hashlib.blake2b(tensor.contiguous().numpy().tobytes(), digest_size=8).hexdigest()


class PassRecorder:
    """Wraps a FastLlama's forward: while ``passes`` is a list, each pass appends (cache length
    before it, rows fed, logits hash, per-layer hash of the keys and values it wrote)."""

    def __init__(self, model: FastLlama) -> None:
        self.model, self.unrecorded = model, model.forward
        self.passes: list[tuple[int, int, str, list[str]]] | None = None
        model.forward = self.recorded  # type: ignore[method-assign]

    def recorded(self, ids: list[int], n_logits: int, branches: Sequence[tuple[int, int]] = ()) -> torch.Tensor:
        before = self.model.length
        logits = self.unrecorded(ids, n_logits, branches)
        if self.passes is not None:
            self.passes.append((before, len(ids), digest(logits), self.layer_hashes(before, before + len(ids))))
        return logits

    def layer_hashes(self, start: int, stop: int) -> list[str]:
        return [digest(k[:, start:stop]) + digest(v[:, start:stop]) for k, v in zip(self.model.keys, self.model.values)]


def same_cache(a: list[tuple[torch.Tensor, torch.Tensor]], b: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Whether two replies' per-layer keys and values are equal bit for bit over the positions both hold."""
    n = min(a[0][0].shape[1], b[0][0].shape[1])
    return all(torch.equal(ka[:, :n].view(torch.int32), kb[:, :n].view(torch.int32))
               and torch.equal(va[:, :n].view(torch.int32), vb[:, :n].view(torch.int32))
               for (ka, va), (kb, vb) in zip(a, b, strict=True))


ORDERS = ("llama", "ours", "targets-first")


@dataclass
class Decoded:
    """A reply, its target passes' hashes (target-only replies) and its cache over the reply's positions."""

    reply: list[int]
    passes: list[tuple[int, int, str, list[str]]]
    cache: list[tuple[torch.Tensor, torch.Tensor]]


def compare(first: Decoded, hybrid: Decoded, second: Decoded) -> tuple[str, bool]:
    """Where the replies part as tokens, the first pass whose bits parted between the two target-only
    replies (and its first layer), and whether hybrid's and the second's caches equal the first's;
    and whether any bit parted."""
    line = (f"first differences as tokens: target-only 1 vs hybrid {first_difference(first.reply, hybrid.reply)},"
            f" target-only 2 vs hybrid {first_difference(second.reply, hybrid.reply)};"
            f" passes {len(first.passes)}/{len(second.passes)}, first pass whose bits parted: ")
    parted = next((i for i, (a, b) in enumerate(zip(first.passes, second.passes, strict=False)) if a != b), None)
    line += str(parted)
    if parted is not None:
        a, b = first.passes[parted], second.passes[parted]
        layer = next((i for i, (x, y) in enumerate(zip(a[3], b[3], strict=True)) if x != y), None)
        line += f" (after {a[0]} tokens, {a[1]} fed; first layer whose keys or values parted: {layer})"
    equal = [same_cache(hybrid.cache, first.cache), same_cache(second.cache, first.cache)]
    line += f"; hybrid's and target-only 2's caches equal target-only 1's, every layer: {equal}"
    return line, parted is not None or not all(equal)


def main() -> None:
    order = sys.argv[1]
    if order not in ORDERS:
        raise SystemExit(f"the first argument is one of {', '.join(ORDERS)}")
    runtime = load_runtime(Settings())
    params = runtime.params(max_new_tokens=128)
    model = lean_forward(runtime.pair.target.runner)
    recorder = PassRecorder(model)

    def decode(mode: str, ids: list[int]) -> Decoded:
        recorder.passes = [] if mode == "target" else None
        reply = list(run_mode(runtime, mode, ids, params).token_ids)
        # Only the positions whose cached token is the reply's: a reply's last pass may leave a
        # rejected draft token where a kept branch, never fed again, took its place.
        fed = common_prefix_length(runtime.engine.target.ids, [*ids, *reply])
        cache = [(k[:, :fed].clone(), v[:, :fed].clone()) for k, v in zip(model.keys, model.values)]
        return Decoded(reply, recorder.passes or [], cache)

    items = load_suite(Path(sys.argv[2]) if len(sys.argv) > 2 else default_suite_path())
    prompts = [(item.id, runtime.prompt_ids(item.messages)) for item in items]
    # The order of the morning's two processes that saw a first reply part: every target-only reply first.
    firsts = {name: decode("target", ids) for name, ids in prompts} if order == "targets-first" else {}
    parted = 0
    for name, ids in prompts:
        first = firsts.get(name) or decode("target", ids)
        hybrid = decode("hybrid", ids)
        for mode in LLAMA_MODES if order == "llama" else ():
            run_mode(runtime, mode, ids, params)
        second = decode("target", ids)
        line, bits_parted = compare(first, hybrid, second)
        print(f"{time.strftime('%H:%M:%S')} {name} {len(ids)} prompt tokens; {line}", flush=True)
        parted += bits_parted
    print("prompts with any bit parted:", parted, flush=True)


if __name__ == "__main__":
    main()
