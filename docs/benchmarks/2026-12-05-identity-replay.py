"""The held-out headline run's order of replies, replayed to watch target-only and `hybrid` agree
(this folder's README, "Held-out prompts on the Xeon").

The bench's held-out run on the Xeon (2026-12-05-held-out-vnni-llama.csv) had one `hybrid` row not
identical to target-only: `held-edit-inv-defaultdict`, the first code-editing prompt. This script
decodes the prompts in the bench's order and modes (target-only, `hybrid`, then with ``llama`` the
three llama.cpp modes, in one process, fresh caches each reply, 128 new tokens), prints where each
prompt's target-only and `hybrid` replies first differ, and on a difference decodes target-only,
`hybrid` and target-only again and says which of the first two each agrees with. With a second
argument it stops after that prompt.

Run: .venv/bin/python docs/benchmarks/2026-12-05-identity-replay.py llama [PROMPT]
     .venv/bin/python docs/benchmarks/2026-12-05-identity-replay.py ours [PROMPT]   # without llama.cpp
The outputs of 2026-12-05 (the Xeon with AVX-512 VNNI) are 2026-12-05-identity-replay.txt beside this file.
"""

from __future__ import annotations

import sys

from specdec_tui.bench.llama_cpp import LLAMA_MODES
from specdec_tui.bench.modes import run_mode
from specdec_tui.bench.suite import load_suite
from specdec_tui.config import Settings
from specdec_tui.runtime import load_runtime
from specdec_tui.tui.widgets.compare_view import first_difference

PROMPTS = "docs/benchmarks/2026-12-05-held-out-prompts.jsonl"


def main() -> None:
    with_llama = sys.argv[1] == "llama"
    stop_after = sys.argv[2] if len(sys.argv) > 2 else None
    runtime = load_runtime(Settings())
    params = runtime.params(max_new_tokens=128)

    def reply(mode: str, ids: list[int]) -> list[int]:
        return list(run_mode(runtime, mode, ids, params).token_ids)

    for item in load_suite(PROMPTS):
        ids = runtime.prompt_ids(item.messages)
        replies = {mode: reply(mode, ids) for mode in ("target", "hybrid", *(LLAMA_MODES if with_llama else ()))}
        target, hybrid = replies["target"], replies["hybrid"]
        differ = first_difference(target, hybrid)
        print(item.id, len(ids), "prompt tokens; target-only and hybrid first differ at", differ, flush=True)
        if differ is not None:
            for mode in ("target", "hybrid", "target"):
                again = reply(mode, ids)
                print(f"  {mode} again: first differs from the first target-only reply at {first_difference(again, target)},"
                      f" from the first hybrid reply at {first_difference(again, hybrid)}", flush=True)
        if item.id == stop_after:
            break


if __name__ == "__main__":
    main()
