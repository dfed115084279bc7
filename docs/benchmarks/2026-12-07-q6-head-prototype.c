// The target's output head read as 6-bit weights (Q6_K's own numbers) against int8 blocks: a
// prototype, timed, not built into the package.
//
// The default target's head is 151,936 columns of 1,536 Q6_K weights. The package reads it as int8
// blocks, one byte a weight (233 MB a pass); Q6_K itself stores 6 bits a weight, a signed 8-bit
// scale per 16 inputs and a half-precision scale per 256 (0.82 bytes a weight, 191 MB). Both loops
// below read 16 columns at a time, four inputs a 32-bit lane, and multiply with `vpdpbusd`:
// - int8: a 64-byte record a step (16 columns x 4 inputs); the rows as unsigned bytes (x + 128),
//   less 128 times each column's sum at the end.
// - q6: four records of 64 six-bit weights from three 64-byte loads (192 bytes), spread to bytes
//   with `vpermt2b`, `vpmultishiftqb` and an AND (AVX-512 VBMI); the weights as unsigned (0-63),
//   the rows as signed bytes; each 16 inputs' sums start at -32 times the row's sum over them
//   (so the products are of q - 32), times that sub-block's scale, and each 256 inputs' integer sums
//   times their half-precision scale into floats.
// Both are checked against a scalar loop on a few columns, then timed in turn (each buffer is
// larger than the last-level cache, so every call streams from memory), two threads.
//
// Build and run (AVX-512 VNNI and VBMI):
//   gcc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512vbmi -mf16c -mfma -fopenmp
//       docs/benchmarks/2026-12-07-q6-head-prototype.c -o /tmp/q6-head
//   OMP_NUM_THREADS=2 /tmp/q6-head
// output: docs/benchmarks/2026-12-07-q6-head-prototype.txt
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 151936, K = 1536, COLS = 16, BLOCKS = N / COLS, SUPER = 256, SUPERS = K / SUPER, SUBS = SUPER / 16,
       MAX_ROWS = 4 };
enum { INT8_BLOCK = K * COLS, Q6_RECORDS = SUPER * COLS * 6 / 8, Q6_SCALES = SUBS * COLS, Q6_BLOCK = SUPERS * (Q6_RECORDS + Q6_SCALES + 2 * COLS) };

static int AHEAD = 0;  // bytes fetched ahead in software (0: none)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static uint64_t state = 88172645463325252ull;
static uint32_t next_random(void) {
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (uint32_t)(state >> 11);
}

// ---- int8 blocks: per block, K/4 records of 16 columns x 4 inputs; a float scale and an int32 sum per column
static void int8_rows(int rows, const uint8_t* x_u8, const float* x_scale, const int8_t* w, const float* scales,
                      const int32_t* sums, float* out) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < BLOCKS; ++b) {
    const int8_t* record = w + (size_t)b * INT8_BLOCK;
    __m512i acc[MAX_ROWS];
    for (int r = 0; r < rows; ++r) acc[r] = _mm512_setzero_si512();
    for (int i = 0; i < K / 4; ++i) {
      if (AHEAD) _mm_prefetch((const char*)record + 64 * i + AHEAD, _MM_HINT_T0);
      const __m512i weights = _mm512_loadu_si512(record + 64 * i);
      for (int r = 0; r < rows; ++r) {
        const __m512i x = _mm512_set1_epi32(*(const int32_t*)(x_u8 + r * K + 4 * i));
        acc[r] = _mm512_dpbusd_epi32(acc[r], x, weights);
      }
    }
    const __m512i sum = _mm512_loadu_si512(sums + b * COLS);
    const __m512 scale = _mm512_loadu_ps(scales + b * COLS);
    for (int r = 0; r < rows; ++r) {
      const __m512i exact = _mm512_sub_epi32(acc[r], _mm512_slli_epi32(sum, 7));
      _mm512_storeu_ps(out + (size_t)r * N + b * COLS,
                       _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale), _mm512_set1_ps(x_scale[r])));
    }
  }
}

// ---- q6: per block, each superblock's 64 records of 48 bytes (16 columns x 4 six-bit weights, 24 bits
// a column), then each superblock's 16 x 16 signed sub-block scales, then its 16 half-precision scales
static __m512i spread_index[4];
static __m512i shift_control, six_bits;

static void q6_setup(void) {
  // Record k of a sub-block is bytes 48k..48k+47 of its three loads: records 0-1 from loads 0 and 1,
  // records 2-3 from loads 1 and 2. Lane c takes its column's three bytes (and one more, unused).
  for (int k = 0; k < 4; ++k) {
    uint8_t index[64];
    for (int lane = 0; lane < 16; ++lane)
      for (int j = 0; j < 4; ++j) index[4 * lane + j] = (uint8_t)(48 * k + 3 * lane + (j < 3 ? j : 2) - (k < 2 ? 0 : 64));
    spread_index[k] = _mm512_loadu_si512(index);
  }
  uint8_t control[64];
  for (int j = 0; j < 64; ++j) control[j] = (uint8_t)((j % 8 < 4 ? 0 : 32) + 6 * (j % 4));
  shift_control = _mm512_loadu_si512(control);
  six_bits = _mm512_set1_epi8(0x3f);
}

static void q6_rows(int rows, const int8_t* x_s8, const int32_t* x_sub_sums, const float* x_scale, const uint8_t* w,
                    float* out) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < BLOCKS; ++b) {
    __m512 total[MAX_ROWS];
    for (int r = 0; r < rows; ++r) total[r] = _mm512_setzero_ps();
    for (int s = 0; s < SUPERS; ++s) {
      const uint8_t* block = w + (size_t)b * Q6_BLOCK;
      const uint8_t* super = block + s * Q6_RECORDS;
      const int8_t* sub_scales = (const int8_t*)(block + SUPERS * Q6_RECORDS + s * Q6_SCALES);
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(block + SUPERS * (Q6_RECORDS + Q6_SCALES)) + s));
      __m512i acc[MAX_ROWS];
      for (int r = 0; r < rows; ++r) acc[r] = _mm512_setzero_si512();
      for (int sub = 0; sub < SUBS; ++sub) {
        const uint8_t* bytes = super + 192 * sub;
        if (AHEAD)
          for (int line = 0; line < 3; ++line) _mm_prefetch((const char*)bytes + 64 * line + AHEAD, _MM_HINT_T0);
        const __m512i l0 = _mm512_loadu_si512(bytes), l1 = _mm512_loadu_si512(bytes + 64),
                      l2 = _mm512_loadu_si512(bytes + 128);
        __m512i q[4];
        q[0] = _mm512_permutex2var_epi8(l0, spread_index[0], l1);
        q[1] = _mm512_permutex2var_epi8(l0, spread_index[1], l1);
        q[2] = _mm512_permutex2var_epi8(l1, spread_index[2], l2);
        q[3] = _mm512_permutex2var_epi8(l1, spread_index[3], l2);
        for (int k = 0; k < 4; ++k) q[k] = _mm512_and_si512(_mm512_multishift_epi64_epi8(shift_control, q[k]), six_bits);
        const __m512i scale = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(sub_scales + COLS * sub)));
        for (int r = 0; r < rows; ++r) {
          const int8_t* x = x_s8 + r * K + SUPER * s + 16 * sub;
          __m512i t = _mm512_set1_epi32(-32 * x_sub_sums[r * (K / 16) + SUBS * s + sub]);
          for (int k = 0; k < 4; ++k) t = _mm512_dpbusd_epi32(t, q[k], _mm512_set1_epi32(*(const int32_t*)(x + 4 * k)));
          acc[r] = _mm512_add_epi32(acc[r], _mm512_mullo_epi32(t, scale));
        }
      }
      for (int r = 0; r < rows; ++r) total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), d, total[r]);
    }
    for (int r = 0; r < rows; ++r)
      _mm512_storeu_ps(out + (size_t)r * N + b * COLS, _mm512_mul_ps(total[r], _mm512_set1_ps(x_scale[r])));
  }
}

// The six-bit weight of column c (within its block) at input i of superblock s, as packed.
static int q6_weight(const uint8_t* super, int c, int i) {
  const int record = i / 4, j = i % 4;
  const uint8_t* p = super + 48 * record + 3 * c;
  const uint32_t bits = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
  return (bits >> (6 * j)) & 63;
}

static float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

int main(int argc, char** argv) {
  if (argc > 1) AHEAD = atoi(argv[1]);
  q6_setup();
  int8_t* w8 = aligned_alloc(64, (size_t)BLOCKS * INT8_BLOCK);
  float* scales = aligned_alloc(64, sizeof(float) * N);
  int32_t* sums = aligned_alloc(64, sizeof(int32_t) * N);
  uint8_t* w6 = aligned_alloc(64, (size_t)BLOCKS * Q6_BLOCK + 64);
  for (size_t i = 0; i < (size_t)BLOCKS * INT8_BLOCK; ++i) w8[i] = (int8_t)(next_random() % 255 - 127);
  for (int b = 0; b < BLOCKS; ++b)
    for (int c = 0; c < COLS; ++c) {
      int32_t sum = 0;
      for (int i = 0; i < K / 4; ++i)
        for (int j = 0; j < 4; ++j) sum += w8[(size_t)b * INT8_BLOCK + 64 * i + 4 * c + j];
      sums[b * COLS + c] = sum, scales[b * COLS + c] = 0.001f * (1 + next_random() % 100);
    }
  for (size_t i = 0; i < (size_t)BLOCKS * Q6_BLOCK; ++i) w6[i] = (uint8_t)next_random();
  for (int b = 0; b < BLOCKS; ++b) {
    uint16_t* d = (uint16_t*)(w6 + (size_t)b * Q6_BLOCK + SUPERS * (Q6_RECORDS + Q6_SCALES));
    for (int i = 0; i < SUPERS * COLS; ++i) d[i] = _cvtss_sh(0.0001f * (1 + next_random() % 100), 0);
  }
  int8_t x_s8[MAX_ROWS * K];
  uint8_t x_u8[MAX_ROWS * K];
  int32_t x_sub_sums[MAX_ROWS * K / 16];
  float x_scale[MAX_ROWS];
  for (int r = 0; r < MAX_ROWS; ++r) {
    x_scale[r] = 0.01f * (r + 1);
    for (int i = 0; i < K; ++i) x_s8[r * K + i] = (int8_t)(next_random() % 255 - 127), x_u8[r * K + i] = (uint8_t)(x_s8[r * K + i] + 128);
    for (int g = 0; g < K / 16; ++g) {
      int32_t sum = 0;
      for (int i = 0; i < 16; ++i) sum += x_s8[r * K + 16 * g + i];
      x_sub_sums[r * (K / 16) + g] = sum;
    }
  }
  float* out8 = aligned_alloc(64, sizeof(float) * MAX_ROWS * N);
  float* out6 = aligned_alloc(64, sizeof(float) * MAX_ROWS * N);

  // Checked against scalar loops on the first and last columns of a few blocks, every row.
  int8_rows(MAX_ROWS, x_u8, x_scale, w8, scales, sums, out8);
  q6_rows(MAX_ROWS, x_s8, x_sub_sums, x_scale, w6, out6);
  double worst = 0;
  for (int b = 0; b < BLOCKS; b += 997)
    for (int c = 0; c < COLS; c += 15)
      for (int r = 0; r < MAX_ROWS; ++r) {
        int64_t exact8 = 0;
        for (int i = 0; i < K; ++i) exact8 += (int64_t)w8[(size_t)b * INT8_BLOCK + 64 * (i / 4) + 4 * c + i % 4] * x_s8[r * K + i];
        const double want8 = (double)exact8 * scales[b * COLS + c] * x_scale[r];
        double want6 = 0;
        for (int s = 0; s < SUPERS; ++s) {
          const uint8_t* block = w6 + (size_t)b * Q6_BLOCK;
          const uint8_t* super = block + s * Q6_RECORDS;
          const int8_t* sub_scales = (const int8_t*)(block + SUPERS * Q6_RECORDS + s * Q6_SCALES);
          const uint16_t* d = (const uint16_t*)(block + SUPERS * (Q6_RECORDS + Q6_SCALES)) + COLS * s;
          int64_t exact = 0;
          for (int i = 0; i < SUPER; ++i)
            exact += (int64_t)sub_scales[COLS * (i / 16) + c] * (q6_weight(super, c, i) - 32) * x_s8[r * K + SUPER * s + i];
          want6 += (double)exact * half_to_float(d[c]);
        }
        want6 *= x_scale[r];
        const double e8 = fabs(out8[(size_t)r * N + b * COLS + c] - want8) / (fabs(want8) + 1e-3);
        const double e6 = fabs(out6[(size_t)r * N + b * COLS + c] - want6) / (fabs(want6) + 1e-3);
        if (e8 > worst) worst = e8;
        if (e6 > worst) worst = e6;
      }
  printf("checked against scalar loops: worst relative error %.2e\n", worst);
  if (worst > 1e-4) return 1;

  printf("fetching %d bytes ahead in software\n", AHEAD);
  printf("head %d x %d, two threads: int8 blocks %.1f MB, q6 %.1f MB (%.3f)\n", N, K,
         (double)BLOCKS * INT8_BLOCK / 1e6, (double)BLOCKS * Q6_BLOCK / 1e6, (double)Q6_BLOCK / INT8_BLOCK);
  enum { ROUNDS = 25 };
  double times[2][MAX_ROWS + 1][ROUNDS];
  for (int round = 0; round < ROUNDS; ++round)
    for (int rows = 1; rows <= MAX_ROWS; ++rows)
      for (int which = 0; which < 2; ++which) {
        const int kind = (round + rows + which) % 2;
        const double start = now();
        if (kind == 0) int8_rows(rows, x_u8, x_scale, w8, scales, sums, out8);
        else q6_rows(rows, x_s8, x_sub_sums, x_scale, w6, out6);
        times[kind][rows][round] = now() - start;
      }
  for (int rows = 1; rows <= MAX_ROWS; ++rows) {
    double med[2];
    for (int kind = 0; kind < 2; ++kind) {
      double sorted[ROUNDS - 3];
      memcpy(sorted, times[kind][rows] + 3, sizeof(sorted));
      for (int i = 0; i < ROUNDS - 3; ++i)
        for (int j = i + 1; j < ROUNDS - 3; ++j)
          if (sorted[j] < sorted[i]) { const double t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t; }
      med[kind] = sorted[(ROUNDS - 3) / 2];
    }
    printf("rows %d: int8 blocks %.2f ms (%.1f GB/s), q6 %.2f ms (%.1f GB/s), q6 / int8 %.3f\n", rows, 1e3 * med[0],
           (double)BLOCKS * INT8_BLOCK / med[0] / 1e9, 1e3 * med[1], (double)BLOCKS * Q6_BLOCK / med[1] / 1e9,
           med[1] / med[0]);
  }
  return 0;
}
