"""The paired lever run of 2026-12-03 for a projected draft head, fitted online (this folder's README, "A pass's own
overhead, paired"). Not in the engine: the head is set up here.

P: the draft's head estimates every logit through a rank-128 projection of its hidden state, W U
(U^T h), with U the top eigenvectors of h h^T over the first 256 draft steps it sees (the whole head
until then) and W U computed by the int4 head and packed as int4; the exact head then scores the
estimate's top 8 chunks of 128 ids, -inf elsewhere. W: the whole head (the default). Interleaved per
prompt in one process, all 28 prompts, greedy, 128 new tokens, each variant its own engine.

Run: .venv/bin/python docs/benchmarks/2026-12-03-projected-head.py W P
Output of that day: 2026-12-03-projected-head-1.txt beside this file.
"""

from __future__ import annotations

import sys
import time

import torch
from paired_levers import Reply, decoded, interleaved, lean_forward, print_paired
from torch import nn

from specdec_tui.config import Settings
from specdec_tui.models import quantized_kernels
from specdec_tui.models.draft_head import head_columns
from specdec_tui.models.precision import PackedInt4Linear, linear_from_tensors
from specdec_tui.runtime import build_engine, load_runtime

CHUNK = 128


class ProjectedHead(nn.Module):
    def __init__(self, head: PackedInt4Linear, vocab: int, rank: int, chunks: int, warmup: int) -> None:
        super().__init__()
        self.whole, self.vocab, self.rank, self.chunks, self.warmup = head, vocab, rank, chunks, warmup
        self.gram = torch.zeros(head.in_features, head.in_features, dtype=torch.float64)
        self.seen = 0
        self.basis: torch.Tensor | None = None
        self.estimate: PackedInt4Linear | None = None
        self.per_chunk = CHUNK // quantized_kernels.INT4_COLUMNS
        self.active = True

    def see(self, ids) -> None:
        pass

    def forget(self) -> None:
        pass

    def fit(self) -> None:
        t = time.perf_counter()
        values, vectors = torch.linalg.eigh(self.gram)
        basis = vectors[:, values.argsort(descending=True)[: self.rank]].float().contiguous()
        projected = self.whole(basis.T.contiguous()).T.contiguous()  # [vocab, rank]: W U by the kernel
        packed, scales, minimums = quantized_kernels.pack_int4(projected)
        self.estimate = linear_from_tensors("int4", {"packed": packed, "scales": scales, "minimums": minimums},
                                            self.rank, projected.shape[0])
        self.basis = basis
        print(f"fitted rank {self.rank} on {self.seen} rows in {time.perf_counter() - t:.2f} s", flush=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return self.whole(x)
        if self.estimate is None:
            self.gram += (x.T @ x).double()
            self.seen += x.shape[0]
            if self.seen >= self.warmup:
                self.fit()
            return self.whole(x)
        estimate = self.estimate(x @ self.basis)[:, : self.vocab]
        whole = self.vocab // CHUNK * CHUNK
        peaks = estimate[:, :whole].reshape(x.shape[0], -1, CHUNK).amax(dim=-1)
        chunks = torch.unique(peaks.topk(self.chunks, dim=-1).indices)
        blocks = (chunks[:, None] * self.per_chunk + torch.arange(self.per_chunk)).flatten()
        linear, columns = head_columns(self.whole, blocks)
        logits = x.new_full((x.shape[0], self.vocab), float("-inf"))
        logits[:, columns] = linear(x)
        return logits


VARIANTS = sys.argv[1:] or ["W", "P"]
runtime = load_runtime(Settings())
draft = lean_forward(runtime.pair.draft.runner)
projected = ProjectedHead(draft.head, draft.vocab, rank=128, chunks=8, warmup=256)
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    draft.context_head = projected
    projected.active = name == "P"
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, f"fitted {projected.estimate is not None}"


print_paired(interleaved(runtime, VARIANTS, run), [(name, VARIANTS[0]) for name in VARIANTS[1:]])
