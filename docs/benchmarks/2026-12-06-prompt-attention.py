"""A long prompt's pass with its attention in the package's row-by-row kernel against torch's masked
kernel, which it replaced (this folder's README, "A prompt's attention, row by row").

Each model's prompt pass over a code-editing prompt (the prompt less its last token, as the decoder
feeds it) and over a prompt of 1,040 tokens (that prompt's ids repeated) is timed both ways in turn,
11 rounds, the first left out; the torch kernel's logits are printed against the row kernel's,
which equal those of single steps.

Run: .venv/bin/python docs/benchmarks/2026-12-06-prompt-attention.py
The output of 2026-12-06 (the Intel Xeon with AVX-512 VNNI, 2 cores) is 2026-12-06-prompt-attention.txt
beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.models.layers import KernelAttention
from specdec_tui.runtime import load_runtime

ROUNDS = 11


def masked_kernel(self: KernelAttention, projected: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  keys: torch.Tensor, values: torch.Tensor, length: int) -> torch.Tensor:
    """The attention as it was: torch's masked kernel for a block of more than 64 rows."""
    q = torch.ops.specdec.rotate_into_cache(projected, cos, sin, keys, values, length, self.heads, self.scale)
    if q.shape[0] > self.max_rows:
        return self.attend_block(q, keys, values, length)
    return torch.ops.specdec.attend_rows(q, keys, values, length)


def main() -> None:
    runtime = load_runtime(Settings())
    item = next(item for item in load_suite(default_suite_path()) if item.id == "edit-js-const")
    prompt = runtime.prompt_ids(item.messages)[:-1]
    row_kernel = KernelAttention.forward
    for ids in (prompt, (prompt * 8)[:1040]):
        for role in ("target", "draft"):
            runner = getattr(runtime.pair, role).runner
            times: dict[str, list[float]] = {"row kernel": [], "masked kernel": []}
            logits = {}
            for round_ in range(ROUNDS):
                order = [("row kernel", row_kernel), ("masked kernel", masked_kernel)]
                for name, forward in order if round_ % 2 else order[::-1]:
                    KernelAttention.forward = forward  # type: ignore[method-assign]
                    runner.reset()
                    start = time.perf_counter()
                    logits[name] = runner.forward(ids, 1)
                    times[name].append(time.perf_counter() - start)
            KernelAttention.forward = row_kernel  # type: ignore[method-assign]
            rows, masked = times["row kernel"][1:], times["masked kernel"][1:]
            paired = statistics.median(a / b for a, b in zip(rows, masked, strict=True))
            difference = (logits["row kernel"] - logits["masked kernel"]).abs().max().item()
            print(f"{len(ids)} rows, {role}: row kernel {statistics.median(rows) * 1000:.1f} ms, masked kernel "
                  f"{statistics.median(masked) * 1000:.1f} ms (medians), paired ratio {paired:.3f}; "
                  f"largest logit difference {difference:.2e}", flush=True)


if __name__ == "__main__":
    main()
