// What this host's memory gives a plain read, to set a target pass's 26-27 GB/s beside (this
// folder's README, "What the memory gives a pass (measured, not built)").
//
//   pages    the first 1.5 GB of a file read through its memory map, through an anonymous copy on
//            4 KB pages and through one on 2 MB pages (madvise MADV_HUGEPAGE): whether the page walks
//            of a 1.5 GB stream cost anything;
//   streams  the first 1 GB read by each thread in 1, 2 or 4 interleaved streams, with and without a
//            software fetch 32 KB ahead into L2, every variant in turn round after round (run it with
//            OMP_NUM_THREADS=1 and =2);
//   overlap  a burst of fetches into L2 (PREFETCH KB) issued before about 28 us of arithmetic that
//            touches no memory, then the 1 MB read: whether the fetches go on behind the arithmetic.
//
// Build and run from the repository's root (output: 2026-12-05-memory-stream.txt beside this file):
//   gcc -O2 -mavx512f -mavx512bw -fopenmp docs/benchmarks/2026-12-05-memory-stream.c -o /tmp/memory-stream
//   F=~/.cache/specdec-tui/models/qwen2.5-coder-1.5b.target-int8/packed.safetensors
//   OMP_NUM_THREADS=2 /tmp/memory-stream pages $F
//   OMP_NUM_THREADS=1 /tmp/memory-stream streams $F; OMP_NUM_THREADS=2 /tmp/memory-stream streams $F
//   for kb in 0 64 256 512; do /tmp/memory-stream overlap $F $kb; done
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static double median(double* values, int count) {
  for (int i = 0; i < count; ++i)
    for (int j = i + 1; j < count; ++j)
      if (values[j] < values[i]) { double swap = values[i]; values[i] = values[j]; values[j] = swap; }
  return values[count / 2];
}

// Each thread reads its share of bytes [0, size) in `streams` interleaved parts, fetching `far` bytes
// ahead into L2 where far > 0; the sum keeps the loads from being dropped.
static long read_shares(const char* bytes, size_t size, int streams, long far) {
  long total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const size_t share = size / omp_get_num_threads(), part = share / streams;
    const char* first = bytes + share * omp_get_thread_num();
    __m512i sum = _mm512_setzero_si512();
    for (size_t i = 0; i < part; i += 256)
      for (int s = 0; s < streams; ++s) {
        const char* line = first + s * part + i;
        if (far) _mm_prefetch(line + far, _MM_HINT_T1);
        for (int k = 0; k < 256; k += 64) sum = _mm512_add_epi32(sum, _mm512_loadu_si512(line + k));
      }
    total += _mm512_reduce_add_epi32(sum);
  }
  return total;
}

static const char* mapped(const char* path, size_t size) {
  const int fd = open(path, O_RDONLY);
  const char* bytes = fd < 0 ? MAP_FAILED : mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (bytes == MAP_FAILED) { perror(path); exit(1); }
  return bytes;
}

static void pages(const char* path) {
  const size_t size = (size_t)1536 << 20, huge = (size_t)2 << 20;
  const char* copies[3] = {mapped(path, size)};
  const char* names[3] = {"file's memory map", "anonymous, 4 KB pages", "anonymous, 2 MB pages"};
  for (int k = 1; k < 3; ++k) {
    char* raw = mmap(NULL, size + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* aligned = (char*)(((size_t)raw + huge - 1) & ~(huge - 1));
    madvise(aligned, size, k == 2 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memcpy(aligned, copies[0], size);
    copies[k] = aligned;
  }
  enum { kRounds = 12 };
  double times[3][kRounds];
  long sink = 0;
  for (int r = 0; r < kRounds; ++r)
    for (int k = 0; k < 3; ++k) {
      const double start = now();
      sink += read_shares(copies[k], size, 1, 32768);
      times[k][r] = now() - start;
    }
  for (int k = 0; k < 3; ++k) {
    const double seconds = median(times[k], kRounds);
    printf("%-24s median %.1f ms (%.1f GB/s)\n", names[k], seconds * 1e3, size / seconds / 1e9);
  }
  printf("(%ld)\n", sink & 1);
}

static void streams(const char* path) {
  const size_t size = (size_t)1024 << 20;
  const char* bytes = mapped(path, size);
  const int parts[] = {1, 2, 4, 1, 2, 4};
  const long far[] = {0, 0, 0, 32768, 32768, 32768};
  enum { kVariants = 6, kRounds = 30 };
  double times[kVariants][kRounds];
  long sink = 0;
  for (int r = 0; r < kRounds; ++r)
    for (int k = 0; k < kVariants; ++k) {
      const int v = (k + r) % kVariants;
      const double start = now();
      sink += read_shares(bytes, size, parts[v], far[v]);
      times[v][r] = now() - start;
    }
  for (int v = 0; v < kVariants; ++v) {
    const double seconds = median(times[v], kRounds);
    printf("%d threads, %d streams each, fetching %5ld ahead: median %.1f ms (%.1f GB/s)\n", omp_get_max_threads(),
           parts[v], far[v], seconds * 1e3, size / seconds / 1e9);
  }
  printf("(%ld)\n", sink & 1);
}

static volatile float arithmetic_sink;

static void arithmetic(int steps) {
  float x = 1.0001f;
  for (int i = 0; i < steps; ++i) x = x * 1.0000001f + 1e-9f;
  arithmetic_sink = x;
}

static void overlap(const char* path, long fetch_kb) {
  const size_t size = (size_t)1536 << 20, chunk = (size_t)1 << 20, fetched = (size_t)fetch_kb << 10;
  const char* bytes = mapped(path, size);
  double plain = 0, with_fetch = 0;
  long sink = 0;
  size_t offset = 0;
  enum { kRounds = 400 };
  for (int r = 0; r < kRounds; ++r)
    for (int fetching = 0; fetching < 2; ++fetching) {
      const char* block = bytes + offset;
      offset = offset + 2 * chunk + chunk > size ? 0 : offset + 2 * chunk;
      const double start = now();
      if (fetching)
        for (size_t i = 0; i < fetched; i += 64) _mm_prefetch(block + i, _MM_HINT_T1);
      arithmetic(20000);
      __m512i sum = _mm512_setzero_si512();
      for (size_t i = 0; i < chunk; i += 64) sum = _mm512_add_epi32(sum, _mm512_loadu_si512(block + i));
      sink += _mm512_reduce_add_epi32(sum);
      *(fetching ? &with_fetch : &plain) += now() - start;
    }
  const double start = now();
  arithmetic(20000);
  printf("arithmetic %.1f us, then 1 MB read: %.1f us; with %ld KB fetched into L2 first: %.1f us (%ld)\n",
         (now() - start) * 1e6, plain / kRounds * 1e6, fetch_kb, with_fetch / kRounds * 1e6, sink & 1);
}

int main(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[1], "pages") == 0) pages(argv[2]);
  else if (argc >= 3 && strcmp(argv[1], "streams") == 0) streams(argv[2]);
  else if (argc >= 4 && strcmp(argv[1], "overlap") == 0) overlap(argv[2], atol(argv[3]));
  else { fprintf(stderr, "usage: %s pages FILE | streams FILE | overlap FILE KB\n", argv[0]); return 2; }
  return 0;
}
