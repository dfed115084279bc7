"""Whether the draft's weights can stay in the last-level cache between its tokens (this folder's
README, "Inside a step, on the Xeon").

A draft token reads every weight of the draft once: 278 MB for the default int4 draft (its layers'
nibbles, scales and minimums, and its int4 head). The Xeon of 2026-12-05 reports 260 MB of L3, and
a few drafted tokens run back to back between two target passes, so part of the draft might be read
from the cache instead of memory. Three measurements:

1. Repeated reads of one buffer, by size: the bandwidth a working set of that size gets when it is
   read again and again (from the cache while it fits, from memory past that).
2. The real draft's token cost, the i-th token after a target pass against the i-th after another
   draft run: how much of the draft the cache keeps between tokens as the engine runs it.
3. A "draft" of 278 MB split into a part meant to stay resident (R, read plainly) and a part
   streamed past the cache (S), with a 1.5 GB "target pass" between rounds: S read plainly, with
   ``prefetchnta`` ahead of the loads, or with each line flushed (``clflushopt``) once read.
   If a hint kept S from evicting R, R would read at the first measurement's in-cache bandwidth.

Run: .venv/bin/python docs/benchmarks/2026-12-05-draft-cache-residency.py
(compiles a small reader with torch's inline extension, about a minute; needs AVX2 and CLFLUSHOPT)
The output of 2026-12-05 (Intel Xeon, AVX-512 VNNI, 260 MB L3, 2 cores) is
2026-12-05-draft-cache-residency.txt beside this file.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.utils.cpp_extension import load_inline

from specdec_tui.bench.steps import context_ids
from specdec_tui.config import Settings
from specdec_tui.runtime import load_pair_for

READER = r"""
#include <torch/extension.h>
#include <immintrin.h>
#include <omp.h>

// XORs every 32 bytes of an int8 buffer on two threads, each over its half. hint 0: plain loads;
// 1: prefetchnta 2 KiB ahead of the loads; 2: each line flushed from every cache once read.
int64_t read_buffer(torch::Tensor buffer, int64_t hint) {
  const int8_t* data = buffer.data_ptr<int8_t>();
  const int64_t n = buffer.numel();
  int64_t total = 0;
  #pragma omp parallel num_threads(2) reduction(+ : total)
  {
    const int64_t half = n / 2 / 64 * 64;
    const int id = omp_get_thread_num();
    const int8_t* p = data + id * half;
    const int64_t length = id == 1 ? n - half : half;
    __m256i acc = _mm256_setzero_si256();
    for (int64_t i = 0; i + 64 <= length; i += 64) {
      if (hint == 1) _mm_prefetch(reinterpret_cast<const char*>(p + i + 2048), _MM_HINT_NTA);
      acc = _mm256_xor_si256(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
      acc = _mm256_xor_si256(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
      if (hint == 2) _mm_clflushopt(const_cast<int8_t*>(p + i));
    }
    total += _mm256_extract_epi64(acc, 0);
  }
  return total;
}
"""
MB = 1 << 20
HINTS = {"plain": 0, "prefetchnta": 1, "clflushopt": 2}


def gb_per_s(mb: int, seconds: float) -> float:
    return mb * MB / 1e9 / seconds


def buffer(mb: int) -> torch.Tensor:
    return torch.randint(-100, 100, (mb * MB,), dtype=torch.int8)


def main() -> None:
    reader = load_inline("draft_cache_residency", cpp_sources=READER, functions=["read_buffer"],
                         extra_cflags=["-O3", "-mavx2", "-mclflushopt", "-fopenmp"], extra_ldflags=["-fopenmp"])

    def timed(data: torch.Tensor, hint: int = 0) -> float:
        start = time.perf_counter()
        reader.read_buffer(data, hint)
        return time.perf_counter() - start

    print("1. a buffer read again and again, median of 20 reads:")
    for mb in (32, 64, 128, 160, 192, 224, 256, 320):
        data = buffer(mb)
        print(f"  {mb} MB: {gb_per_s(mb, statistics.median(timed(data) for _ in range(20))):.1f} GB/s")
        del data

    print("2. the default draft's i-th token, ms (median of 12 rounds):")
    pair = load_pair_for(Settings())
    draft, target = pair.draft.runner, pair.target.runner
    context = context_ids(pair, 160)
    draft.reset(); draft.forward(context, 1)
    target.reset(); target.forward(context, 1)

    def draft_run(tokens: int) -> list[float]:
        seconds = []
        for token in context[:tokens]:
            start = time.perf_counter()
            draft.forward([token], 1)
            seconds.append(time.perf_counter() - start)
        draft.crop(len(context))
        return seconds

    after_target, after_draft = [], []
    for _ in range(12):
        target.forward(context[:1], 1)
        target.crop(len(context))
        after_target.append(draft_run(8))
        after_draft.append(draft_run(8))
    for label, runs in (("after a target pass", after_target), ("after another draft run", after_draft)):
        print(f"  {label}: " + " ".join(f"{1000 * statistics.median(column):.1f}" for column in zip(*runs)))

    print("3. R resident + S streamed, a 1.5 GB read between rounds of six (R, S) reads:")
    target_pass = buffer(1536)
    for resident_mb, streamed_mb in ((150, 128), (100, 178)):
        resident, streamed = buffer(resident_mb), buffer(streamed_mb)
        for name, hint in HINTS.items():
            r_times, s_times = [], []
            for _ in range(6):
                timed(target_pass, hint)
                for _ in range(6):
                    r_times.append(timed(resident))
                    s_times.append(timed(streamed, hint))
            r, s = statistics.median(r_times), statistics.median(s_times)
            print(f"  R {resident_mb} MB + S {streamed_mb} MB, S and the 1.5 GB read {name}: "
                  f"R {gb_per_s(resident_mb, r):.1f} GB/s, S {gb_per_s(streamed_mb, s):.1f} GB/s, "
                  f"R + S {1000 * (r + s):.1f} ms")


if __name__ == "__main__":
    main()
