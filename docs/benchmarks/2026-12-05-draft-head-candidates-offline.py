"""Offline, before any build: could a cheaper approximate draft head pick a few candidate ids whose
exact logits the int4 head then computes (this folder's README, "A draft head of candidates,
offline (not built)")?

A draft token reads its whole output head (152k ids of int4 weights, scales and minimums, 77 MB).
The draft's proposal needs only its best id (and runner-up, and how sure it is), so an approximate
head read in fewer bytes could name candidates, and the int4 head's blocks holding them (a few
hundred of its 152k columns) give their exact logits. Whether that keeps the draft's proposals is
whether the whole head's best id is among the approximation's top C.

The draft's final hidden state at every position of the target's greedy reply to every suite prompt
(`2026-12-04-target-replies.json`, read by the draft in one teacher-forced pass over prompt and
reply) goes through the whole int4 head and through each approximation:

- low rank: the head's top r principal directions (an r-wide head of int4 weights would read
  r / 896 of the bytes);
- 2 bits from the int4 nibbles' top two bits, sharing their scales and minimums (the value
  ``scale * (4 * (q >> 2) + 1.5) + minimum``): half the nibbles' bytes, none packed anew;
- 2 and 3 bits quantized afresh per 64 inputs (for comparison).

Then it times, in one process, a draft step with the whole head against the same step's layers
alone, each after streaming 512 MB (as the target's pass does between draft steps), 25 rounds
alternating, and a top-64 over 152k logits.

Run: .venv/bin/python docs/benchmarks/2026-12-05-draft-head-candidates-offline.py
The output of 2026-12-05 is 2026-12-05-draft-head-candidates-offline.txt beside this file.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from paired_levers import lean_forward

from specdec_tui.config import Settings
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.models.precision import PackedInt4Linear
from specdec_tui.models.quantized_kernels import INT4_COLUMNS, INT4_GROUP
from specdec_tui.runtime import load_runtime

REPLIES = Path(__file__).with_name("2026-12-04-target-replies.json")
CANDIDATES = (1, 4, 16, 64)
ROUNDS = 25


def nibbles_scales_minimums(head: PackedInt4Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The head's q [columns, width] and float scale and minimum [columns, groups], out of block order."""
    blocks, groups = head.packed.shape[:2]
    columns = blocks * INT4_COLUMNS
    q = torch.stack([head.packed & 15, head.packed >> 4], dim=-1)  # [block, group, step, column, i, nibble]
    q = q.permute(0, 3, 1, 2, 5, 4).reshape(columns, groups * INT4_GROUP)

    def unblocked(values: torch.Tensor) -> torch.Tensor:
        return values.view(torch.half).float().view(blocks, groups, INT4_COLUMNS).transpose(1, 2).reshape(columns, groups)

    return q, unblocked(head.scales), unblocked(head.minimums)


def grouped(per_group: torch.Tensor) -> torch.Tensor:
    """``per_group`` [columns, groups] spread over each group's 64 inputs."""
    return per_group.repeat_interleave(INT4_GROUP, dim=1)


def fresh_quantized(weight: torch.Tensor, bits: int) -> torch.Tensor:
    groups = weight.view(weight.shape[0], -1, INT4_GROUP)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = (high - low).clamp_min(1e-8) / (2**bits - 1)
    return (((groups - low) / scale).round() * scale + low).view_as(weight)


def hidden_states(runner: FastLlama) -> dict[str, torch.Tensor]:
    """The draft's final-normed hidden state before each reply token, per category."""
    seen: list[torch.Tensor] = []
    head = runner.head

    class Recording(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(x.clone())
            return head(x)

    states: dict[str, list[torch.Tensor]] = defaultdict(list)
    runner.head = Recording()
    try:
        for item in json.loads(REPLIES.read_text()):
            runner.reset()
            runner.forward(item["prompt"] + item["reply"][:-1], len(item["reply"]))
            states[item["category"]].append(seen.pop())
    finally:
        runner.head = head
    return {category: torch.cat(rows) for category, rows in states.items()}


def recall_line(name: str, exact: torch.Tensor, approx: torch.Tensor) -> str:
    """How often the exact best id is among the approximation's top C, and the confidence's error."""
    best = exact.argmax(-1, keepdim=True)
    rank = (approx > approx.gather(1, best)).sum(-1)
    sure = torch.softmax(exact, -1).gather(1, best)[:, 0]
    # Exact logits for the top 64, the approximation elsewhere, as a built head would have them.
    top = approx.topk(64, dim=-1).indices
    mixed = approx.scatter(1, top, exact.gather(1, top))
    mixed_sure = torch.softmax(mixed, -1).gather(1, best)[:, 0]
    return (f"  {name:34s} " + " ".join(f"top {c}: {float((rank < c).float().mean()):.4f}" for c in CANDIDATES)
            + f" | confidence error, median / 99th percentile: {float((sure - mixed_sure).abs().median()):.4f}"
            f" / {float((sure - mixed_sure).abs().quantile(0.99)):.4f}")


def median_ms(times: list[float]) -> float:
    return statistics.median(times[1:]) * 1000


def timings(runner: FastLlama) -> None:
    runner.reset()
    runner.forward(list(range(1000, 1200)), 1)
    x = runner.embedding.rows(torch.tensor([300]))
    positions = torch.arange(200, 201)
    cos, sin = runner.cos[positions], runner.sin[positions]
    other = torch.ones(128 * 1024 * 1024)  # 512 MB, streamed between steps as a target pass would

    def step() -> None:
        runner.forward([300], 1)
        runner.crop(200)

    def layers() -> None:
        torch.ops.specdec.decoder_layers(x, cos, sin, runner.keys, runner.values, 200, *runner.kernel_layers, None)

    times: dict[str, list[float]] = {"step": [], "layers": []}
    for round_ in range(ROUNDS):
        order: list[tuple[str, Callable[[], None]]] = [("step", step), ("layers", layers)]
        for name, run in order if round_ % 2 else order[::-1]:
            other.sum()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    logits = torch.randn(1, 151936)
    top: list[float] = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        logits.topk(64, dim=-1)
        top.append(time.perf_counter() - start)
    step_ms, layers_ms = median_ms(times["step"]), median_ms(times["layers"])
    print(f"draft step after 200 tokens, each after streaming 512 MB, median of {ROUNDS - 1}: whole step "
          f"{step_ms:.2f} ms, its layers alone {layers_ms:.2f} ms, so the head and the rest {step_ms - layers_ms:.2f} ms; "
          f"a top-64 over 152k logits {median_ms(top):.3f} ms")


@torch.inference_mode()
def main() -> None:
    runtime = load_runtime(Settings())
    runner = lean_forward(runtime.pair.draft.runner)
    head = runner.head
    assert isinstance(head, PackedInt4Linear)
    q, scale, minimum = nibbles_scales_minimums(head)
    vocab, width = head.out_features, head.in_features
    weight = (q.float() * grouped(scale) + grouped(minimum))[:vocab, :width]
    top_bits = ((q >> 2).float() * 4 + 1.5) * grouped(scale) + grouped(minimum)
    approximations = {
        # Not an approximation: the unpacked int4 values in float, against the kernel's 8-bit rows.
        "int4, unpacked, in float": weight,
        "2 bits, the nibbles' top two": top_bits[:vocab, :width],
        "2 bits, quantized afresh": fresh_quantized(weight, 2),
        "3 bits, quantized afresh": fresh_quantized(weight, 3),
    }
    # Principal directions of the head's rows: eigenvectors of W^T W, largest first.
    values, vectors = torch.linalg.eigh((weight.T @ weight).double())
    values, vectors = values.flip(0), vectors.flip(1).float()
    states = hidden_states(runner)
    head_bytes = sum(t.numel() * t.element_size() for t in (head.packed, head.scales, head.minimums))
    print(f"draft head: {vocab} ids x {width}, {head_bytes / 1e6:.1f} MB of int4 weights, scales and minimums "
          f"(nibbles {head.packed.numel() / 1e6:.1f} MB)")
    print("share of the head's squared values in its top r directions:",
          ", ".join(f"r = {r}: {float(values[:r].sum() / values.sum()):.3f}" for r in (128, 256, 384)))
    for category, hidden in states.items():
        exact = head(hidden)
        print(f"{category}: {hidden.shape[0]} positions; how often the whole head's best id is among an approximation's top C")
        for r in (128, 256, 384):
            basis = vectors[:, :r]
            print(recall_line(f"rank {r}", exact, (hidden @ basis) @ (weight @ basis).T))
        for name, approximate in approximations.items():
            print(recall_line(name, exact, hidden @ approximate.T))
    timings(runner)


if __name__ == "__main__":
    main()
