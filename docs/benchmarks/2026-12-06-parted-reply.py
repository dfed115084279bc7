"""Which of two replies a bench run kept is the odd one, where its `hybrid` row was not identical.

`specdec-bench` keeps every reply's token ids beside its CSV (FILE.replies.jsonl). For one prompt
this prints where the run's target-only and `hybrid` replies part, with the text either side, then
decodes the prompt again in this process, target-only and `hybrid` in turn from fresh caches
(greedy, 128 new tokens, default settings), and says which of the run's two replies each new one
matches.

Run: .venv/bin/python docs/benchmarks/2026-12-06-parted-reply.py REPLIES.jsonl PROMPT_ID [ROUNDS]
The output of 2026-12-06 for the dawn suite run's `edit-docstrings` is 2026-12-06-parted-reply.txt
beside this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from paired_levers import mode_reply

from specdec_tui.bench.suite import default_suite_path, load_suite
from specdec_tui.config import Settings
from specdec_tui.engine.cached_model import common_prefix_length
from specdec_tui.runtime import load_runtime


def main() -> None:
    path, prompt_id = Path(sys.argv[1]), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    kept = {(record["prompt_id"], record["mode"]): record["token_ids"]
            for record in map(json.loads, path.read_text().splitlines())}
    run = {mode: kept[(prompt_id, mode)] for mode in ("target", "hybrid")}
    runtime = load_runtime(Settings())
    tokenizer = runtime.pair.target.tokenizer
    parts = common_prefix_length(run["target"], run["hybrid"])
    print(f"{prompt_id}: the run's replies part at token {parts + 1} "
          f"({len(run['target'])} and {len(run['hybrid'])} tokens)")
    print(f"  before: {tokenizer.decode(run['target'][max(parts - 12, 0):parts])!r}")
    for mode, ids in run.items():
        print(f"  {mode} goes on: {tokenizer.decode(ids[parts:parts + 12])!r}")
    item = next(item for item in load_suite(default_suite_path()) if item.id == prompt_id)
    prompt = list(runtime.prompt_ids(item.messages))
    for round_ in range(rounds):
        for mode in ("target", "hybrid"):
            again = list(mode_reply(runtime, prompt, mode).token_ids)
            same = [name for name, ids in run.items() if ids == again]
            found = " and ".join(f"the run's {name} reply" for name in same) or (
                f"neither (parts from the run's target-only reply at token "
                f"{common_prefix_length(run['target'], again) + 1})")
            print(f"round {round_ + 1}, {mode} again: {found}", flush=True)


if __name__ == "__main__":
    main()
