"""Where a chat process's resident memory is after loading the default pair and after one long
`hybrid` reply: the README's memory table ("a long `hybrid` reply").

Loads the pair with the default settings, then asks for a long tutorial (up to 1,500 new tokens,
greedy), and at both points prints the process's resident memory (the sum of /proc/self/smaps' Rss,
and the peak from getrusage) with the twelve largest mappings (files by path; [heap] and [anon] for
the allocator's memory, where the models' caches live).

Run: .venv/bin/python docs/benchmarks/2026-12-06-long-reply-memory.py
Output of 2026-12-06 (Zen 4 EPYC, 2 cores, AVX-512 VNNI): 2026-12-06-long-reply-memory.txt (the KV
caches from the allocator), 2026-12-06-long-reply-memory-own-mapping.txt (in mappings of their own,
``KVCache``: the caches are in its [anon] line).
"""

from __future__ import annotations

import re
import resource
from collections import defaultdict

from specdec_tui.config import Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.runtime import load_runtime


def report(when: str) -> None:
    resident: dict[str, int] = defaultdict(int)
    mapping = "[anon]"
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                fields = line.split()
                mapping = fields[5] if len(fields) > 5 else "[anon]"
            elif line.startswith("Rss:"):
                resident[mapping] += int(line.split()[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"{when}: resident {sum(resident.values()) / 1e6:.2f} GB, peak {peak:.2f} GB")
    for name, kilobytes in sorted(resident.items(), key=lambda item: -item[1])[:12]:
        print(f"  {kilobytes / 1e3:8.1f} MB  {name}")


runtime = load_runtime(Settings())
report("after loading")
params = runtime.params(max_new_tokens=1500)
ids = runtime.prompt_ids([{"role": "user", "content":
                           "Write a long, detailed tutorial on Python generators, with many code examples."}])
engine = runtime.engine
engine.reset()
for event in engine.decoder.generate(ids, params, engine.drafter("hybrid", params)):
    if isinstance(event, FinishedEvent):
        print(f"the reply: {len(event.token_ids)} tokens, a context of {len(ids) + len(event.token_ids)}")
report("after the reply")
