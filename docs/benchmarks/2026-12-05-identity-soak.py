"""A soak for identity (this folder's README, "A Xeon with AVX-512 VNNI (2026-12-05, morning)").

Every suite prompt's target-only reply is decoded first, all 28 in a row, from fresh caches (greedy,
128 new tokens, default settings), as the two processes that once saw a first reply differ did;
then each prompt's `hybrid` reply and a second target-only reply, all three compared. The optional
argument rotates the order of the prompts, so that each process meets them in another order.

Run: .venv/bin/python docs/benchmarks/2026-12-05-identity-soak.py [ROTATION]
The output of 2026-12-05 (rotation 0) is 2026-12-05-identity-soak.txt beside this file; three more
processes that morning (rotations 0, 9 and 19) ran a first form of it with the same decodes.
"""

from __future__ import annotations

import sys

from paired_levers import mode_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import common_prefix_length
from specdec_tui.runtime import Runtime, load_runtime


def reply_of(runtime: Runtime, prompt: list[int], mode: str) -> list[int]:
    return list(mode_reply(runtime, prompt, mode).token_ids)


def parting(a: list[int], b: list[int]) -> str:
    return "same" if a == b else f"parts at token {common_prefix_length(a, b) + 1}"


def main() -> None:
    runtime = load_runtime(Settings())
    rotation = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    prompts = load_suite(default_suite_path())
    prompts = prompts[rotation:] + prompts[:rotation]
    first = {item.id: reply_of(runtime, list(runtime.prompt_ids(item.messages)), "target") for item in prompts}
    differing = 0
    for item in prompts:
        prompt = list(runtime.prompt_ids(item.messages))
        hybrid, again = reply_of(runtime, prompt, "hybrid"), reply_of(runtime, prompt, "target")
        if not first[item.id] == again == hybrid:
            differing += 1
            print(f"{item.id}: target-only again {parting(first[item.id], again)}, "
                  f"hybrid {parting(first[item.id], hybrid)} (against the first target-only reply)", flush=True)
    print(f"rotation {rotation}: {len(prompts)} prompts, {differing} with a reply that differs", flush=True)


if __name__ == "__main__":
    main()
