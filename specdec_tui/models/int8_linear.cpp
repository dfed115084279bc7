// Row-wise int8 linear layer for AVX2 CPUs, registered as torch.ops.specdec.int8_linear.
//
// Each activation row is quantized on its own (scale = row's absolute maximum / 63, values stored
// as q + 64 in [1, 127]) and multiplied by int8 weights in exact 32-bit integer arithmetic. Every
// output element therefore goes through the same operations whatever the number of rows, which is
// what makes a verify block over M tokens equal M single steps. Seven-bit activations keep the sum
// of two u8 x s8 products under the int16 limit of vpmaddubsw, so nothing saturates.
//
// The weights stream from memory once per call: all rows of a call are multiplied against a block
// of weights while it is in cache, so a few extra rows cost arithmetic, not memory traffic.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kBlockColumns = 16;  // output columns per weight block: two 8-lane vectors
constexpr int64_t kGroup = 4;          // input columns summed per lane by vpmaddubsw + vpmaddwd
constexpr int kMaxRows = 5;            // rows per pass over a block: 2 x 5 accumulators fit the registers
constexpr int kOffset = 64;            // activations are stored as q + 64
constexpr float kLevels = 63.0f;       // q in [-63, 63]
constexpr int64_t kPrefetchBytes = 2048;

// Quantizes the rows of x [M, K] into q [M, padded] (padding holds a zero) and their scales.
void quantize_rows(const float* x, int64_t rows, int64_t width, int64_t padded, uint8_t* q, float* scale) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * width;
    float peak = 0.f;
    for (int64_t k = 0; k < width; ++k) peak = std::max(peak, std::fabs(row[k]));
    const float inverse = peak > 0.f ? kLevels / peak : 0.f;
    scale[m] = peak / kLevels;
    uint8_t* out = q + m * padded;
    for (int64_t k = 0; k < width; ++k) out[k] = static_cast<uint8_t>(std::nearbyint(row[k] * inverse) + kOffset);
    std::fill(out + width, out + padded, static_cast<uint8_t>(kOffset));
  }
}

// Integer dot products of R activation rows with one block of 16 weight columns.
template <int R>
void block_products(const int8_t* weights, const uint8_t* const* rows, int64_t groups, int32_t* sums) {
  __m256i low[R], high[R];
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; ++r) low[r] = high[r] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* w = weights + g * kGroup * kBlockColumns;
    _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchBytes), _MM_HINT_T0);
    const __m256i w_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i w_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32));
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, rows[r] + g * kGroup, sizeof four);
      const __m256i x = _mm256_set1_epi32(four);
      low[r] = _mm256_add_epi32(low[r], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w_low), ones));
      high[r] = _mm256_add_epi32(high[r], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w_high), ones));
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kBlockColumns), low[r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kBlockColumns + 8), high[r]);
  }
}

void rows_products(int rows, const int8_t* weights, const uint8_t* const* q, int64_t groups, int32_t* sums) {
  switch (rows) {
    case 1: return block_products<1>(weights, q, groups, sums);
    case 2: return block_products<2>(weights, q, groups, sums);
    case 3: return block_products<3>(weights, q, groups, sums);
    case 4: return block_products<4>(weights, q, groups, sums);
    default: return block_products<5>(weights, q, groups, sums);
  }
}

// x [M, K] float; packed [N/16, K/4, 16, 4] int8 (padded); scales [N/16*16] float;
// column_sums [N/16*16] int32 (sum of each column's int8 weights); bias [N] float or none.
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& column_sums, const std::optional<at::Tensor>& bias, int64_t out_features) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "int8_linear: x must be a 2-D float32 tensor");
  TORCH_CHECK(packed.dim() == 4 && packed.scalar_type() == at::kChar && packed.is_contiguous(),
              "int8_linear: packed weights must be a contiguous 4-D int8 tensor");
  const at::Tensor input = x.contiguous();
  const int64_t rows = input.size(0), width = input.size(1);
  const int64_t blocks = packed.size(0), groups = packed.size(1);
  const int64_t padded = groups * kGroup;
  TORCH_CHECK(padded >= width && padded - width < kGroup, "int8_linear: input width ", width,
              " does not match the packed weights");
  TORCH_CHECK(blocks * kBlockColumns >= out_features, "int8_linear: too few weight blocks");

  std::vector<uint8_t> q(rows * padded);
  std::vector<float> row_scale(rows);
  quantize_rows(input.data_ptr<float>(), rows, width, padded, q.data(), row_scale.data());

  at::Tensor out = at::empty({rows, out_features}, input.options());
  float* o = out.data_ptr<float>();
  const int8_t* w = packed.data_ptr<int8_t>();
  const float* w_scale = scales.data_ptr<float>();
  const int32_t* w_sum = column_sums.data_ptr<int32_t>();
  const float* b = bias.has_value() ? bias->data_ptr<float>() : nullptr;

  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    int32_t sums[kMaxRows * kBlockColumns];
    const uint8_t* chunk[kMaxRows];
    for (int64_t block = begin; block < end; ++block) {
      const int8_t* weights = w + block * groups * kGroup * kBlockColumns;
      const int64_t first = block * kBlockColumns;
      const int64_t last = std::min(first + kBlockColumns, out_features);
      for (int64_t m0 = 0; m0 < rows; m0 += kMaxRows) {
        const int count = static_cast<int>(std::min<int64_t>(kMaxRows, rows - m0));
        for (int i = 0; i < count; ++i) chunk[i] = q.data() + (m0 + i) * padded;
        rows_products(count, weights, chunk, groups, sums);
        for (int i = 0; i < count; ++i) {
          const float s = row_scale[m0 + i];
          float* out_row = o + (m0 + i) * out_features;
          for (int64_t n = first; n < last; ++n) {
            const int32_t exact = sums[i * kBlockColumns + (n - first)] - kOffset * w_sum[n];
            float value = static_cast<float>(exact) * (w_scale[n] * s);
            if (b != nullptr) value += b[n];
            out_row[n] = value;
          }
        }
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(specdec, m) {
  m.def("int8_linear(Tensor x, Tensor packed, Tensor scales, Tensor column_sums, Tensor? bias, int out_features) -> Tensor",
        &int8_linear);
}
