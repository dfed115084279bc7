// Whether a prompt's int8 products on AVX2 would be faster with "signed rows" (2026-12-04; this folder's README,
// "Inside a step, on the AVX2 hosts"). One thread, 124 rows a call, each block of weights in cache across its passes:
// the arithmetic-bound case a prompt's call is, where the signed rows were expected to win.
//
// Today's products (the package's AVX2 block_products, five rows a pass): each activation stored as
// q + 64 in [1, 127] is the unsigned operand of vpmaddubsw against the int8 weights, and every pair
// of products is widened to int32 by vpmaddwd: four multiplies for a row's 64 products of a group.
// Signed rows: q in [-63, 63] takes each weight's sign (vpsignb) against |w| (vpabsb once a block
// pass), so |q w| <= 63 * 127 and two groups' pairs still fit int16: one vpmaddwd widens them both,
// three multiplies for 64 products instead of four, at the price of a vpsignb per weight vector and
// row. Both give the same exact sums (checked below against q + 64's, less 64 times the column sums).
//
// Build and run:
//   g++ -O3 -mavx2 -mfma -std=c++20 -o /tmp/signed-rows docs/benchmarks/2026-12-04-signed-rows-prompt.cpp
//   /tmp/signed-rows
// The output of 2026-12-04 (AMD EPYC Zen 3, AVX2) is 2026-12-04-signed-rows-prompt.txt beside this file.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int64_t kGroup = 4, kColumns = 16, kBlockBytes = kGroup * kColumns;
constexpr int kRows = 124;  // a prompt's call

#define EACH_ROW _Pragma("GCC unroll 16")

inline __m256i broadcast4(const void* p) {
  int32_t four;
  std::memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}

// The package's AVX2 products: R rows of q + 64 against a block of 16 columns.
template <int R>
void offset_rows(const int8_t* w, const uint8_t* const* rows, int64_t groups, int32_t* sums) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i low[R], high[R];
  EACH_ROW for (int r = 0; r < R; ++r) low[r] = high[r] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i w_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + g * kBlockBytes));
    const __m256i w_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + g * kBlockBytes + 32));
    EACH_ROW for (int r = 0; r < R; ++r) {
      const __m256i x = broadcast4(rows[r] + g * kGroup);
      low[r] = _mm256_add_epi32(low[r], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w_low), ones));
      high[r] = _mm256_add_epi32(high[r], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w_high), ones));
    }
  }
  EACH_ROW for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kColumns), low[r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kColumns + 8), high[r]);
  }
}

// |w| times q with w's sign, two groups' int16 pairs added before one widening (groups is even).
template <int R>
void signed_rows(const int8_t* w, const int8_t* const* rows, int64_t groups, int32_t* sums) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i low[R], high[R];
  EACH_ROW for (int r = 0; r < R; ++r) low[r] = high[r] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; g += 2) {
    const int8_t* p = w + g * kBlockBytes;
    __m256i v[4], a[4];
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
      a[i] = _mm256_abs_epi8(v[i]);
    }
    EACH_ROW for (int r = 0; r < R; ++r) {
      const __m256i x = broadcast4(rows[r] + g * kGroup), y = broadcast4(rows[r] + g * kGroup + kGroup);
      const __m256i pairs_low = _mm256_add_epi16(_mm256_maddubs_epi16(a[0], _mm256_sign_epi8(x, v[0])),
                                                 _mm256_maddubs_epi16(a[2], _mm256_sign_epi8(y, v[2])));
      const __m256i pairs_high = _mm256_add_epi16(_mm256_maddubs_epi16(a[1], _mm256_sign_epi8(x, v[1])),
                                                  _mm256_maddubs_epi16(a[3], _mm256_sign_epi8(y, v[3])));
      low[r] = _mm256_add_epi32(low[r], _mm256_madd_epi16(pairs_low, ones));
      high[r] = _mm256_add_epi32(high[r], _mm256_madd_epi16(pairs_high, ones));
    }
  }
  EACH_ROW for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kColumns), low[r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kColumns + 8), high[r]);
  }
}

template <typename Row, typename Pass>
void all_rows(int per_pass, const std::vector<Row>& q, int64_t width, int64_t blocks, const int8_t* w,
              int64_t groups, std::vector<int32_t>& out, Pass pass) {
  int32_t sums[8 * kColumns];
  const Row* chunk[8];
  for (int64_t b = 0; b < blocks; ++b)
    for (int m0 = 0; m0 < kRows; m0 += per_pass) {
      const int count = std::min(per_pass, kRows - m0);
      for (int i = 0; i < count; ++i) chunk[i] = q.data() + (m0 + i) * width;
      pass(count, w + b * groups * kBlockBytes, chunk, sums);
      for (int i = 0; i < count; ++i)
        std::copy(sums + i * kColumns, sums + (i + 1) * kColumns, out.begin() + ((m0 + i) * blocks + b) * kColumns);
    }
}

double seconds(auto&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void compare(int64_t width, int64_t blocks) {
  const int64_t groups = width / kGroup;
  std::mt19937 random(1);
  std::vector<int8_t> w(blocks * groups * kBlockBytes);
  for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(random() % 255) - 127);
  std::vector<uint8_t> offset(kRows * width);
  std::vector<int8_t> plain(kRows * width);
  for (int64_t i = 0; i < kRows * width; ++i) {
    plain[i] = static_cast<int8_t>(static_cast<int>(random() % 127) - 63);
    offset[i] = static_cast<uint8_t>(plain[i] + 64);
  }
  std::vector<int32_t> column_sums(blocks * kColumns, 0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t g = 0; g < groups; ++g)
      for (int c = 0; c < kColumns; ++c)
        for (int i = 0; i < kGroup; ++i)
          column_sums[b * kColumns + c] += w[(b * groups + g) * kBlockBytes + (c / 8) * 32 + (c % 8) * 4 + i];

  std::vector<int32_t> today(kRows * blocks * kColumns), candidate(today.size());
  const auto run_today = [&] {
    all_rows(5, offset, width, blocks, w.data(), groups, today, [&](int n, const int8_t* p, const uint8_t* const* r, int32_t* s) {
      switch (n) {
        case 5: offset_rows<5>(p, r, groups, s); break;
        case 4: offset_rows<4>(p, r, groups, s); break;
        default: for (int i = 0; i < n; ++i) offset_rows<1>(p, r + i, groups, s + i * kColumns);
      }
    });
  };
  for (const int per_pass : {2, 3, 4}) {
    const auto run_signed = [&] {
      all_rows(per_pass, plain, width, blocks, w.data(), groups, candidate, [&](int n, const int8_t* p, const int8_t* const* r, int32_t* s) {
        if (n == per_pass && n == 4) signed_rows<4>(p, r, groups, s);
        else if (n == per_pass && n == 3) signed_rows<3>(p, r, groups, s);
        else if (n == per_pass && n == 2) signed_rows<2>(p, r, groups, s);
        else for (int i = 0; i < n; ++i) signed_rows<1>(p, r + i, groups, s + i * kColumns);
      });
    };
    run_today();
    run_signed();
    bool equal = true;
    for (int m = 0; m < kRows; ++m)
      for (int64_t j = 0; j < blocks * kColumns; ++j)
        equal &= today[m * blocks * kColumns + j] - 64 * column_sums[j] == candidate[m * blocks * kColumns + j];
    std::vector<double> a, b;
    for (int round = 0; round < 7; ++round) {
      a.push_back(seconds(run_today));
      b.push_back(seconds(run_signed));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    const double macs = double(kRows) * width * kColumns * blocks;
    std::printf("| %lld x %lld | %d | %.0f | %.0f | %.2fx | %s |\n", static_cast<long long>(blocks * kColumns),
                static_cast<long long>(width), per_pass, macs / a[3] / 1e9, macs / b[3] / 1e9, a[3] / b[3],
                equal ? "yes" : "NO");
  }
}

}  // namespace

int main() {
  std::printf("%d rows, one thread, median of 7 rounds in turn\n\n", kRows);
  std::printf("| matrix | signed rows a pass | today GMAC/s | signed GMAC/s | signed / today | same sums |\n");
  std::printf("|---|---|---|---|---|---|\n");
  compare(1536, 96);   // 1536 x 1536 (2.4 MB): an attention projection of the default target
  compare(8960, 16);   // 256 columns of the down projection (2.3 MB)
}
