"""The paired lever run of 2026-12-03 for what a forward pass spent outside its weights' products
(this folder's README, "A pass's own overhead, paired").

Interleaved per prompt in one process (the order rotating from prompt to prompt), all 28 prompts,
greedy, 128 new tokens, fresh caches, default settings (K = 6, hybrid); one engine per variant over
the one loaded pair, whose forwards are set up before each reply:

- B: as before: one kernel call per decoder layer, the GGUF embedding rows dequantized by gguf's
  numpy, the rotary tables computed for every pass, torch's argmax and topk on the logits;
- A: today's default: the layers in one kernel call (``decoder_layers``), the rows by the
  ``gguf_rows`` kernel, the rotary tables made once for the cache's capacity, ``first_argmax``;
- L, E, R, G: A with only the layers, the embedding, the rotary tables or the argmax as before.

Target-only runs as A does (today's), so "x target" of B is before's hybrid over today's target-only;
the variants' ratios to each other, paired per prompt, are the measurement.

Run: .venv/bin/python docs/benchmarks/2026-12-03-step-overhead.py B A
Every variant is compared with the first, paired per prompt; the outputs of that day are
2026-12-03-step-overhead-*.txt beside this file.
"""

from __future__ import annotations

import sys

import torch
from paired_levers import Reply, decoded, interleaved, lean_forward, print_paired

from specdec_tui.config import Settings
from specdec_tui.engine import acceptance, drafters
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.runtime import build_engine, load_runtime

VARIANTS = sys.argv[1:] or ["B", "A"]
#: What each variant runs as before: "layers", "embedding", "rotary".
AS_BEFORE = {"B": {"layers", "embedding", "rotary", "argmax"}, "A": set(), "L": {"layers"}, "E": {"embedding"},
             "R": {"rotary"}, "G": {"argmax"}}
runtime = load_runtime(Settings())
engines = {name: build_engine(runtime.pair, runtime.settings)[0] for name in VARIANTS}
one_call = torch.ops.specdec.decoder_layers


def layer_by_layer(x, cos, sin, keys, values, length, heads, scale, eps, norms, kinds, weights, biases, out_features,
                   visible):
    """``decoder_layers`` called once per layer, as the forward did before."""
    for i in range(len(keys)):
        x = one_call(x, cos, sin, keys[i : i + 1], values[i : i + 1], length, heads, scale, eps,
                     norms[2 * i : 2 * i + 2], kinds[4 * i : 4 * i + 4], weights[12 * i : 12 * i + 12],
                     biases[4 * i : 4 * i + 4], out_features, visible)
    return x


class RotaryPerPass:
    """Stands in for a runner's cos or sin table: computes its rows for every pass, as before."""

    def __init__(self, runner: FastLlama, part: int) -> None:
        self.runner, self.part = runner, part

    def __getitem__(self, positions: torch.Tensor) -> torch.Tensor:
        return self.runner._rotary(positions)[self.part]


def torch_argmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


def topk_second_best(logits: torch.Tensor, best: int) -> int:
    """``second_best`` as it was, by topk(2)."""
    top = logits.topk(2)
    value, index = (top.values[1], top.indices[1]) if int(top.indices[0]) == best else (top.values[0], top.indices[0])
    return int(index) if value > float("-inf") else -1


FAST = (acceptance.first_argmax, drafters.second_best)


def runners() -> list[FastLlama]:
    return [lean_forward(model.runner) for model in (runtime.pair.target, runtime.pair.draft)]


for runner in runners():
    runner._grow(2048)  # no reply grows the caches, which would put the tables back in place of the stand-ins
tables = {id(runner): (runner.cos, runner.sin) for runner in runners()}


def set_up(name: str) -> None:
    before = AS_BEFORE[name]
    torch.ops.specdec.decoder_layers = layer_by_layer if "layers" in before else one_call
    acceptance.first_argmax = drafters.first_argmax = torch_argmax if "argmax" in before else FAST[0]
    drafters.second_best = topk_second_best if "argmax" in before else FAST[1]
    for runner in runners():
        runner.embedding.on_kernel = "embedding" not in before
        runner.cos, runner.sin = ((RotaryPerPass(runner, 0), RotaryPerPass(runner, 1)) if "rotary" in before
                                  else tables[id(runner)])


def run(ids: list[int], name: str) -> Reply:
    engine = engines[VARIANTS[0] if name == "target" else name]
    set_up("A" if name == "target" else name)
    params = runtime.params(max_new_tokens=128)
    drafter = None if name == "target" else engine.drafter("hybrid", params)
    event = decoded(engine, ids, params, drafter)
    return event.token_ids, event.summary, ""


print_paired(interleaved(runtime, VARIANTS, run), [(name, VARIANTS[0]) for name in VARIANTS[1:]])
