// Quantized linear layers for AVX2 CPUs, registered as torch.ops.specdec.int8_linear and int4_linear,
// the RMS norm between them (rms_norm), the attention of a few new rows (rotate_into_cache,
// attend_rows) and SwiGLU's silu(gate) * up (silu_mul).
//
// int8_linear: each activation row is quantized on its own (scale = row's absolute maximum / 63,
// values stored as q + 64 in [1, 127]) and multiplied by int8 weights in exact 32-bit integer
// arithmetic. Every output element therefore goes through the same operations whatever the number
// of rows, which is what makes a verify block over M tokens equal M single steps. Seven-bit
// activations keep the sum of two u8 x s8 products under the int16 limit of vpmaddubsw, so nothing
// saturates.
//
// The weights stream from memory once per call: all rows of a call are multiplied against a block
// of weights while it is in cache, so a few extra rows cost arithmetic, not memory traffic.
//
// The integer products are built for three instruction sets (quantized_products.inc) and the
// fastest one the processor runs is chosen when the library loads: AVX-512 VNNI (vpdpbusd on the
// 256-bit registers, of which AVX-512 has 32: twelve rows per pass), AVX-VNNI (the same
// instruction, 16 registers) or AVX2. Their sums are exact integers, so all three give the same
// numbers bit for bit; use_instruction_set picks another one, for tests and measurements.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr int64_t kBlockColumns = 16;  // output columns per int8 weight block: two 8-lane vectors
constexpr int64_t kGroup = 4;          // input columns summed per lane by one dot product of four
constexpr int kOffset = 64;            // activations are stored as q + 64
constexpr float kLevels = 63.0f;       // q in [-63, 63]
constexpr int64_t kPrefetchBytes = 2048;     // how far ahead the weights are fetched into L1
constexpr int64_t kFarPrefetchBytes = 16384; // and into L2
// A wide int8 pass of a few rows (a step's, on an Intel processor) fetches twice as far ahead into L2:
// whole target passes timed in turn in one process on a Xeon, 0.96-1.01x at 2-5 rows, 0.92-0.99x at
// 6-9, even at one row (48 KB no better; the int4 draft's lone row gained nothing from 32 KB).
constexpr int64_t kWideFarPrefetchBytes = 32768;
constexpr int64_t kInt4Columns = 8;    // output columns per int4 block: one 8-lane vector
constexpr int64_t kInt4Group = 64;     // inputs sharing one int4 scale and minimum
constexpr int kMostRows = 12;          // the most rows per pass any instruction set takes
// Whether passes of one or two rows (a one-token step, a short verify) fetch their weights ahead in
// software as longer ones do: -1 as each instruction set chooses (SPECDEC_SHORT_PASS_PREFETCH), 0 or
// 1 to override that (for measurements).
std::atomic<int> short_pass_prefetch{-1};

// One instruction set's products: int8 multiplies up to int8_rows rows with one block of weights
// (sums [rows, 16]), int4 up to int4_rows rows (out [rows, 8], before the rows' scales). A set with
// wide passes (wide_int8 not null) takes calls of more rows than those with them: up to
// wide_int8_rows rows a pass, and two int4 blocks at a time, up to wide_int4_rows rows (out [rows, 16]).
struct Products {
  const char* name;
  bool (*runs_here)();
  int int8_rows;
  void (*int8)(int rows, const int8_t* weights, const uint8_t* const* q, int64_t groups, int32_t* sums);
  int int4_rows;
  void (*int4)(int rows, const uint8_t* weights, const uint16_t* scales, const uint16_t* minimums,
               const int8_t* const* q, const float* const* sums, int64_t groups, float* out);
  int wide_int8_rows;
  void (*wide_int8)(int rows, const int8_t* first, const int8_t* second, const uint8_t* const* q, int64_t groups,
                    int32_t* sums, bool far);
  int wide_int4_rows;
  void (*wide_int4)(int rows, const uint8_t* first, const uint8_t* second, const uint16_t* first_scales,
                    const uint16_t* second_scales, const uint16_t* first_minimums, const uint16_t* second_minimums,
                    const int8_t* const* q, const float* const* sums, int64_t groups, float* out, bool far);
};

}  // namespace

// Two 8-lane accumulators per row and the two weight vectors fit AVX2's 16 registers at 5 rows.
// Short passes fetch less ahead: a lone row nothing (int8) or only the near lines (int4), two rows
// only the near lines. On an AMD EPYC (Zen 3) without VNNI, passes of the default pair alternating
// with the fetching ones pass by pass took 0.85-0.98x the time at one row on the int8 target,
// 0.96-0.98x on the int4 draft, 0.82-0.94x at two rows; at three to six rows fetching less was
// 1.02-1.12x slower.
#define SPECDEC_ISA avx2
#define SPECDEC_TARGET
#define SPECDEC_SHORT_PASS_PREFETCH false
#define SPECDEC_INT8_ROWS 5
#define SPECDEC_INT4_ROWS 3
namespace {
#include "quantized_products.inc"
}

#define SPECDEC_ISA avx_vnni
#define SPECDEC_SHORT_PASS_PREFETCH true
#define SPECDEC_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define SPECDEC_DPBUSD _mm256_dpbusd_avx_epi32
#define SPECDEC_INT8_ROWS 6
#define SPECDEC_INT4_ROWS 4
#define SPECDEC_INT4_SPLIT_ROWS 2
namespace {
#include "quantized_products.inc"
}

// EVEX-encoded vpdpbusd reaches 32 registers: 24 accumulators for twelve rows. (On 512-bit
// registers, sixteen rows a pass, an AMD EPYC ran 16-row passes faster but 5- and 9-row ones slower:
// calls of many rows, a prompt's, take the wide passes, two blocks of weights and 12 rows at a time;
// on an Intel processor, which runs them whole, every int8 call does.)
// (On a Zen 4 EPYC, int8 passes of one or two rows without the fetches, as on AVX2, took 0.76-0.96x
// and 0.92-0.97x the time, and target-only replies ran 1.06-1.32x faster, but `hybrid` ones, which
// almost never run such passes, 0.94-1.01x on prose and 0.98-1.04x on code in five paired runs, so
// they fetch as before.)
#define SPECDEC_ISA avx512_vnni
#define SPECDEC_SHORT_PASS_PREFETCH true
#define SPECDEC_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define SPECDEC_DPBUSD _mm256_dpbusd_epi32
#define SPECDEC_INT8_ROWS 12
#define SPECDEC_INT4_ROWS 8
#define SPECDEC_INT4_SPLIT_ROWS 5
#define SPECDEC_WIDE_ROWS
#define SPECDEC_WIDE_INT8_ROWS 12
#define SPECDEC_WIDE_INT4_ROWS 12
namespace {
#include "quantized_products.inc"
}

namespace {

bool runs_avx2() {
  // The choice below is made by a static constructor, which may run before libgcc's own has read
  // the CPU's features; without this every check would say no, and VNNI hosts would get AVX2.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool runs_avx_vnni() { return runs_avx2() && __builtin_cpu_supports("avxvnni"); }
bool runs_avx512_vnni() {
  return runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

// Fastest first.
const Products kInstructionSets[] = {
    avx512_vnni::products("avx512_vnni", runs_avx512_vnni),
    avx_vnni::products("avx_vnni", runs_avx_vnni),
    avx2::products("avx2", runs_avx2),
};

const Products* fastest_here() {
  for (const Products& set : kInstructionSets)
    if (set.runs_here()) return &set;
  return &kInstructionSets[std::size(kInstructionSets) - 1];  // the Python side loads us only with AVX2
}

std::atomic<const Products*> chosen{fastest_here()};
// Whether calls of many rows take the chosen set's wide passes, where it has them (for measurements).
std::atomic<bool> wide_passes{true};
// The fewest rows a call needs to take them. Timed on an AMD EPYC against the 256-bit passes, a
// pass of the 1.5B int8 target's layers after 128 tokens: slower at 13-20 rows (1.09-1.14x), even
// at 24-32, faster from 40 (0.93x at 40, 0.86x at 64, 0.79x at a 154-token prompt); the 0.5B int4
// draft's: slower at 2-5 rows, faster from 6 (0.93x at 6, 0.84x at 8, 0.74x at 40, 0.64x at 154).
// The EPYC runs a 512-bit instruction as two 256-bit halves; an Intel Xeon runs it whole, and there
// the target's int8 pass of any number of rows was as fast or faster on the wide passes once a call
// of one pass fetched its weights far ahead as the 256-bit passes do (0.92-0.96x at 1-2 rows,
// 0.90-0.93x at 12, even in between).
int64_t wide_int8_from_here() {
  __builtin_cpu_init();
  return __builtin_cpu_is("intel") ? 1 : 32;
}
std::atomic<int64_t> wide_int8_from{wide_int8_from_here()};
// The int4 calls' threshold. The wide int4 passes read two blocks a thread at once, and a step's pass
// fetches both far ahead: on a Zen 4 EPYC its products from memory took 0.94-0.97x the 256-bit
// pass's time at 2-5 rows and 0.85-0.89x at 6-9. Taken from two rows, they made the int4 target's
// `hybrid` 1.03-1.07x faster but the default pair's 0.96-0.98x on code generation in two paired
// runs, so calls take them from six rows, as before the far fetches.
std::atomic<int64_t> wide_int4_from{6};

std::vector<std::string> instruction_sets() {
  std::vector<std::string> names;
  for (const Products& set : kInstructionSets)
    if (set.runs_here()) names.emplace_back(set.name);
  return names;
}

std::string instruction_set() { return chosen.load()->name; }

// The previous setting, so a caller can put it back.
bool use_wide_passes(bool on) { return wide_passes.exchange(on); }
int64_t use_wide_passes_from(int64_t rows) {
  TORCH_CHECK(rows >= 1, "use_wide_passes_from: at least 1 row, not ", rows);
  return wide_int8_from.exchange(rows);
}
int64_t use_wide_int4_passes_from(int64_t rows) {
  TORCH_CHECK(rows >= 1, "use_wide_int4_passes_from: at least 1 row, not ", rows);
  return wide_int4_from.exchange(rows);
}
int64_t use_short_pass_prefetch(int64_t setting) {
  TORCH_CHECK(setting >= -1 && setting <= 1, "use_short_pass_prefetch: -1, 0 or 1, not ", setting);
  return short_pass_prefetch.exchange(static_cast<int>(setting));
}

void use_instruction_set(const std::string& name) {
  for (const Products& set : kInstructionSets) {
    if (name != set.name) continue;
    TORCH_CHECK(set.runs_here(), "use_instruction_set: this processor cannot run ", name);
    chosen.store(&set);
    return;
  }
  TORCH_CHECK(false, "use_instruction_set: no instruction set named ", name);
}

// The mask of the 8 lanes below `count` (all of them from 8 up): what a block's last columns keep.
inline __m256i lanes_below(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(std::min<int64_t>(count, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The largest |x| of a row. A NaN is passed over, as std::max(peak, |x|) would: maxps returns its
// second operand when either is NaN.
float row_peak(const float* row, int64_t width) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 lanes = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= width; k += 8) lanes = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(row + k), magnitude), lanes);
  alignas(32) float parts[8];
  _mm256_store_ps(parts, lanes);
  float peak = 0.f;
  for (const float part : parts) peak = std::max(peak, part);
  for (; k < width; ++k) peak = std::max(peak, std::fabs(row[k]));
  return peak;
}

// round(row[k] * inverse) + offset for k < width, 32 at a time while they last, then one by one:
// cvtps rounds to nearest even as nearbyint does, so both give the same values. Signed: saturated
// to int8 (used for [-127, 127]), else to uint8 (used for [1, 127]).
template <bool Signed, typename Out>
void quantize_row(const float* row, int64_t width, float inverse, int32_t offset, Out* out) {
  const __m256 times = _mm256_set1_ps(inverse);
  const __m256i shift = _mm256_set1_epi32(offset);
  // packs works within 128-bit halves; this puts the four quarters' values back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t k = 0;
  for (; k + 32 <= width; k += 32) {
    __m256i q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + k + 8 * j), times)), shift);
    const __m256i low = _mm256_packs_epi32(q[0], q[1]), high = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = Signed ? _mm256_packs_epi16(low, high) : _mm256_packus_epi16(low, high);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_permutevar8x32_epi32(bytes, order));
  }
  for (; k < width; ++k) out[k] = static_cast<Out>(std::nearbyint(row[k] * inverse) + offset);
}

// The checks both linears make: a float matrix of rows, and contiguous packed weights whose
// padded width and block count fit it. Returns the rows as a contiguous tensor.
at::Tensor checked_rows(const char* op, const at::Tensor& x, const at::Tensor& packed, int64_t packed_dims,
                        at::ScalarType packed_type, int64_t group, int64_t block_columns, int64_t out_features) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, op, ": x must be a 2-D float32 tensor");
  TORCH_CHECK(packed.dim() == packed_dims && packed.scalar_type() == packed_type && packed.is_contiguous(),
              op, ": packed weights must be a contiguous ", packed_dims, "-D ", packed_type, " tensor");
  const int64_t width = x.size(1), padded = packed.size(1) * group;
  TORCH_CHECK(padded >= width && padded - width < group, op, ": input width ", width,
              " does not match the packed weights");
  TORCH_CHECK(packed.size(0) * block_columns >= out_features, op, ": too few weight blocks");
  return x.contiguous();
}

// Quantizes the rows of x [M, K] into q [M, padded] (padding holds a zero) and their scales.
void quantize_rows(const float* x, int64_t rows, int64_t width, int64_t padded, uint8_t* q, float* scale) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * width;
    const float peak = row_peak(row, width);
    const float inverse = peak > 0.f ? kLevels / peak : 0.f;
    scale[m] = peak / kLevels;
    uint8_t* out = q + m * padded;
    quantize_row<false>(row, width, inverse, kOffset, out);
    std::fill(out + width, out + padded, static_cast<uint8_t>(kOffset));
  }
}

// One row's outputs of a block of 16 columns, the first `columns` of them kept:
// (sums - kOffset * column sums) * (column scale * row scale) + bias. Every output takes these steps in
// 8-lane vectors, a block's last columns too (masked), so no output depends on where its column is.
void scale_block(const int32_t* sums, const int32_t* column_sums, const float* column_scales, float row_scale,
                 const float* bias, int64_t columns, float* out) {
  for (int64_t c = 0; c < kBlockColumns && c < columns; c += 8) {
    const __m256i kept = lanes_below(columns - c);
    const __m256i exact = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + c)),
                                           _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(column_sums + c)),
                                                              _mm256_set1_epi32(kOffset)));
    __m256 value = _mm256_mul_ps(_mm256_cvtepi32_ps(exact),
                                 _mm256_mul_ps(_mm256_loadu_ps(column_scales + c), _mm256_set1_ps(row_scale)));
    if (bias != nullptr) value = _mm256_add_ps(value, _mm256_maskload_ps(bias + c, kept));
    _mm256_maskstore_ps(out + c, kept, value);
  }
}

// x [M, K] float; packed [N/16, K/4, 16, 4] int8 (padded); scales [N/16*16] float;
// column_sums [N/16*16] int32 (sum of each column's int8 weights); bias [N] float or none.
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& column_sums, const std::optional<at::Tensor>& bias, int64_t out_features) {
  const at::Tensor input = checked_rows("int8_linear", x, packed, 4, at::kChar, kGroup, kBlockColumns, out_features);
  const int64_t rows = input.size(0), width = input.size(1);
  const int64_t blocks = packed.size(0), groups = packed.size(1);
  const int64_t padded = groups * kGroup;

  std::vector<uint8_t> q(rows * padded);
  std::vector<float> row_scale(rows);
  quantize_rows(input.data_ptr<float>(), rows, width, padded, q.data(), row_scale.data());

  at::Tensor out = at::empty({rows, out_features}, input.options());
  float* o = out.data_ptr<float>();
  const int8_t* w = packed.data_ptr<int8_t>();
  const float* w_scale = scales.data_ptr<float>();
  const int32_t* w_sum = column_sums.data_ptr<int32_t>();
  const float* b = bias.has_value() ? bias->data_ptr<float>() : nullptr;

  const Products& products = *chosen.load();
  const int64_t block_bytes = groups * kGroup * kBlockColumns;
  // A block's outputs from its sums (stride ints a row).
  const auto store_block = [&](int64_t block, int64_t m0, int count, const int32_t* sums, int64_t stride) {
    const int64_t first = block * kBlockColumns;
    const int64_t last = std::min(first + kBlockColumns, out_features);
    for (int i = 0; i < count; ++i)
      scale_block(sums + i * stride, w_sum + first, w_scale + first, row_scale[m0 + i], b != nullptr ? b + first : nullptr,
                  last - first, o + (m0 + i) * out_features + first);
  };
  if (products.wide_int8 != nullptr && wide_passes.load() && rows >= wide_int8_from.load()) {
    // Two blocks at a time; an odd last block is paired with itself and stored once. A call of one
    // pass (a step's) fetches the weights far ahead, as the 256-bit passes do; in a prompt's, the
    // later passes over a block find it in cache.
    const bool far = rows <= products.wide_int8_rows;
    at::parallel_for(0, (blocks + 1) / 2, 1, [&](int64_t begin, int64_t end) {
      int32_t sums[kMostRows * 2 * kBlockColumns];
      const uint8_t* chunk[kMostRows];
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t block = 2 * pair;
        const int64_t next = block + 1 < blocks ? block + 1 : block;
        for (int64_t m0 = 0; m0 < rows; m0 += products.wide_int8_rows) {
          const int count = static_cast<int>(std::min<int64_t>(products.wide_int8_rows, rows - m0));
          for (int i = 0; i < count; ++i) chunk[i] = q.data() + (m0 + i) * padded;
          products.wide_int8(count, w + block * block_bytes, w + next * block_bytes, chunk, groups, sums, far);
          store_block(block, m0, count, sums, 2 * kBlockColumns);
          if (next != block) store_block(next, m0, count, sums + kBlockColumns, 2 * kBlockColumns);
        }
      }
    });
    return out;
  }
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    int32_t sums[kMostRows * kBlockColumns];
    const uint8_t* chunk[kMostRows];
    for (int64_t block = begin; block < end; ++block) {
      for (int64_t m0 = 0; m0 < rows; m0 += products.int8_rows) {
        const int count = static_cast<int>(std::min<int64_t>(products.int8_rows, rows - m0));
        for (int i = 0; i < count; ++i) chunk[i] = q.data() + (m0 + i) * padded;
        products.int8(count, w + block * block_bytes, chunk, groups, sums);
        store_block(block, m0, count, sums, kBlockColumns);
      }
    }
  });
  return out;
}

// ---- int8 weights held as 4-bit indices into tables (a target's Q4_K tensors) ----
//
// Where a column's float weights over 32 inputs came from one Q4_K sub-block (a * q - b, q in [0, 15]),
// its int8 weights there take at most 16 values: T[q] = (A q + B) >> 7 in int16 arithmetic, saturated
// to int8, from two int16 parameters. A record per 4 columns and 32 inputs holds 64 bytes of indices
// (a column's 16 bytes: byte i holds input i's index, and above it input 16 + i's) and then A of the
// four columns and B of the four: 80 bytes for 128 weights, 0.625 of int8's. A pass decodes each
// record once, a 128-bit lane a column (vpshufb looks up within lanes), and every row multiplies the
// decoded int8 weights as int8_linear does: the same exact integer sums and the same scaling, so the
// outputs are int8_linear's on the expanded weights bit for bit. AVX-512 VNNI only. On a Zen 4 EPYC,
// the target's Q4_K tensors (1112M weights) took 0.63-0.66x int8_linear's time at one or two rows,
// 0.68-0.88x at three, 0.75-1.10x at four and 0.94-1.62x at six (two blocks a pass, the better; one
// block a pass, the worse), 1.48-1.67x at nine: the decoding is arithmetic every row count pays.
constexpr int64_t kTableColumns = 4;   // columns per record: one 128-bit lane each
constexpr int64_t kTableInputs = 32;   // inputs per record: one table each
constexpr int64_t kTableRecord = 80;   // bytes per record
constexpr int kTableRows = 12;         // rows per pass (six a pass measured slower at nine rows)
constexpr int64_t kDecodedStep = 256;  // bytes of a step's two records decoded
constexpr int kInlineRows = 7;         // the most rows a call takes in one pass, decoding as it goes

#define SPECDEC_TABLE_EACH_ROW _Pragma("GCC unroll 16")
#define SPECDEC_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

alignas(64) constexpr int16_t kTableSteps[32] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
                                                 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
// Byte shuffles spreading a record's A (bytes 0-7) and B (8-15) over each column's lane, eight int16 each.
alignas(64) constexpr int8_t kSpreadA[64] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                             2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                             4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5,
                                             6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7};
alignas(64) constexpr int8_t kSpreadB[64] = {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9,
                                             10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11,
                                             12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
                                             14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15};

// A record's 128 int8 weights: the 4 columns' lanes over its first 16 inputs (low) and its last 16 (high).
SPECDEC_AVX512_VNNI inline __attribute__((always_inline)) void decode_record(const uint8_t* record, __m512i& low,
                                                                             __m512i& high) {
  const __m512i step = _mm512_load_si512(kTableSteps);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i parameters = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(record + 64)));
  const __m512i a = _mm512_shuffle_epi8(parameters, _mm512_load_si512(kSpreadA));
  const __m512i b = _mm512_shuffle_epi8(parameters, _mm512_load_si512(kSpreadB));
  const __m512i first = _mm512_add_epi16(_mm512_mullo_epi16(step, a), b);     // q = 0..7
  const __m512i second = _mm512_add_epi16(first, _mm512_slli_epi16(a, 3));   // q = 8..15
  const __m512i table = _mm512_packs_epi16(_mm512_srai_epi16(first, 7), _mm512_srai_epi16(second, 7));
  const __m512i indices = _mm512_loadu_si512(record);
  low = _mm512_shuffle_epi8(table, _mm512_and_si512(indices, nibble));
  high = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(indices, 4), nibble));
}

// R rows' products with one step's decoded weights of two column blocks (low and high: the first
// block's, then the second's), added to the rows' accumulators.
template <int R>
SPECDEC_AVX512_VNNI inline __attribute__((always_inline)) void table_step_rows(__m512i (&acc)[2][R],
                                                                               const __m512i* low,
                                                                               const __m512i* high,
                                                                               const uint8_t* const* rows,
                                                                               int64_t j) {
  SPECDEC_TABLE_EACH_ROW
  for (int r = 0; r < R; ++r) {
    const uint8_t* x = rows[r] + j * kTableInputs;
    const __m512i x_low = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    const __m512i x_high = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 16)));
    acc[0][r] = _mm512_dpbusd_epi32(acc[0][r], x_low, low[0]);
    acc[1][r] = _mm512_dpbusd_epi32(acc[1][r], x_low, low[1]);
    acc[0][r] = _mm512_dpbusd_epi32(acc[0][r], x_high, high[0]);
    acc[1][r] = _mm512_dpbusd_epi32(acc[1][r], x_high, high[1]);
  }
}

// The accumulators' sums [R, 8]: the first block's 4 columns, then the second's.
template <int R>
SPECDEC_AVX512_VNNI inline __attribute__((always_inline)) void store_table_sums(__m512i (&acc)[2][R], int32_t* sums) {
  SPECDEC_TABLE_EACH_ROW
  for (int r = 0; r < R; ++r)
    for (int block = 0; block < 2; ++block) {
      // each lane's four partial sums into its first
      __m512i total = _mm512_add_epi32(acc[block][r], _mm512_shuffle_epi32(acc[block][r], _MM_PERM_BADC));
      total = _mm512_add_epi32(total, _mm512_shuffle_epi32(total, _MM_PERM_CDAB));
      alignas(64) int32_t lanes[16];
      _mm512_store_si512(lanes, total);
      for (int c = 0; c < kTableColumns; ++c) sums[(r * 2 + block) * kTableColumns + c] = lanes[4 * c];
    }
}

// How a pass of table_rows reads two blocks' weights: their records, decoding them; the same, also
// keeping what it decoded (kDecodedStep bytes a step: the first block's low, the second's, then their
// high); or what an earlier pass kept.
enum class TableRead { kRecords, kRecordsKept, kKept };

// R rows against two column blocks at once (steps of 32 inputs; second may be first), sums [R, 8].
// Each activation broadcast serves both.
template <int R, TableRead Read>
SPECDEC_AVX512_VNNI inline __attribute__((always_inline)) void table_block_products(const uint8_t* first_records,
                                                                                    const uint8_t* second_records,
                                                                                    uint8_t* kept,
                                                                                    const uint8_t* const* rows,
                                                                                    int64_t steps, int32_t* sums) {
  __m512i acc[2][R];
  SPECDEC_TABLE_EACH_ROW
  for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm512_setzero_si512();
  for (int64_t j = 0; j < steps; ++j) {
    __m512i low[2], high[2];
    if constexpr (Read == TableRead::kKept) {
      const uint8_t* step = kept + j * kDecodedStep;
      low[0] = _mm512_loadu_si512(step);
      low[1] = _mm512_loadu_si512(step + 64);
      high[0] = _mm512_loadu_si512(step + 128);
      high[1] = _mm512_loadu_si512(step + 192);
    } else {
      const uint8_t* first = first_records + j * kTableRecord;
      const uint8_t* second = second_records + j * kTableRecord;
      for (const uint8_t* record : {first, second}) {
        _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchBytes + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(record + kFarPrefetchBytes), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(record + kFarPrefetchBytes + 64), _MM_HINT_T1);
      }
      decode_record(first, low[0], high[0]);
      decode_record(second, low[1], high[1]);
      if constexpr (Read == TableRead::kRecordsKept) {
        uint8_t* step = kept + j * kDecodedStep;
        _mm512_storeu_si512(step, low[0]);
        _mm512_storeu_si512(step + 64, low[1]);
        _mm512_storeu_si512(step + 128, high[0]);
        _mm512_storeu_si512(step + 192, high[1]);
      }
    }
    table_step_rows<R>(acc, low, high, rows, j);
  }
  store_table_sums<R>(acc, sums);
}

template <TableRead Read, int R = 1>
SPECDEC_AVX512_VNNI inline void table_rows_of(int rows, const uint8_t* first, const uint8_t* second, uint8_t* kept,
                                              const uint8_t* const* q, int64_t steps, int32_t* sums) {
  if constexpr (R < kTableRows)
    if (rows > R) return table_rows_of<Read, R + 1>(rows, first, second, kept, q, steps, sums);
  table_block_products<R, Read>(first, second, kept, q, steps, sums);
}

// Products of up to kTableRows rows with two blocks, read as `read` says (kept: steps * kDecodedStep bytes).
SPECDEC_AVX512_VNNI void table_rows(TableRead read, int rows, const uint8_t* first, const uint8_t* second,
                                    uint8_t* kept, const uint8_t* const* q, int64_t steps, int32_t* sums) {
  if (read == TableRead::kRecords) return table_rows_of<TableRead::kRecords>(rows, first, second, kept, q, steps, sums);
  if (read == TableRead::kRecordsKept)
    return table_rows_of<TableRead::kRecordsKept>(rows, first, second, kept, q, steps, sums);
  table_rows_of<TableRead::kKept>(rows, first, second, kept, q, steps, sums);
}

// x [M, K] float; records [N/4, K/32, 80] uint8 (padded); scales and column_sums (each column's scale
// and the sum of its int8 weights) padded to a multiple of 8 columns at least, as scale_block reads
// them (int8_linear's, padded to 16, serve); bias [N] float or none.
at::Tensor table_linear(const at::Tensor& x, const at::Tensor& records, const at::Tensor& scales,
                        const at::Tensor& column_sums, const std::optional<at::Tensor>& bias, int64_t out_features) {
  TORCH_CHECK(records.dim() == 3 && records.size(2) == kTableRecord, "indexed_int8_linear: records must be [N/4, K/32, 80]");
  const at::Tensor input = checked_rows("indexed_int8_linear", x, records, 3, at::kByte, kTableInputs, kTableColumns,
                                        out_features);
  const int64_t columns = (records.size(0) + 1) / 2 * 2 * kTableColumns;  // a pair of blocks at a time
  TORCH_CHECK(scales.numel() >= columns && column_sums.numel() >= columns,
              "indexed_int8_linear: a scale and a column sum for every column of every pair of blocks");
  const int64_t rows = input.size(0), width = input.size(1);
  const int64_t blocks = records.size(0), steps = records.size(1);
  const int64_t padded = steps * kTableInputs;

  std::vector<uint8_t> q(rows * padded);
  std::vector<float> row_scale(rows);
  quantize_rows(input.data_ptr<float>(), rows, width, padded, q.data(), row_scale.data());

  at::Tensor out = at::empty({rows, out_features}, input.options());
  float* o = out.data_ptr<float>();
  const uint8_t* w = records.data_ptr<uint8_t>();
  const float* w_scale = scales.data_ptr<float>();
  const int32_t* w_sum = column_sums.data_ptr<int32_t>();
  const float* b = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  // Two blocks at a time; an odd last block is paired with itself and stored once. A call of more rows
  // than kInlineRows decodes each pair of blocks once: its first pass, of at most kInlineRows rows,
  // keeps what it decodes (the records' stream hides that pass's arithmetic), and the later ones read
  // what it kept, from cache.
  const bool keep = rows > kInlineRows;
  const int64_t first_rows = keep ? std::min<int64_t>(kInlineRows, (rows + 1) / 2) : rows;
  at::parallel_for(0, (blocks + 1) / 2, 1, [&](int64_t begin, int64_t end) {
    int32_t sums[kTableRows * 2 * kTableColumns];
    const uint8_t* chunk[kTableRows];
    std::vector<uint8_t> kept(keep ? steps * kDecodedStep : 0);
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t block = 2 * pair;
      const int64_t next = block + 1 < blocks ? block + 1 : block;
      const uint8_t* first_records = w + block * steps * kTableRecord;
      const uint8_t* second_records = w + next * steps * kTableRecord;
      for (int64_t m0 = 0; m0 < rows;) {
        const int count = static_cast<int>(std::min<int64_t>(m0 == 0 ? first_rows : kTableRows, rows - m0));
        const TableRead read = !keep ? TableRead::kRecords : m0 == 0 ? TableRead::kRecordsKept : TableRead::kKept;
        for (int i = 0; i < count; ++i) chunk[i] = q.data() + (m0 + i) * padded;
        table_rows(read, count, first_records, second_records, kept.data(), chunk, steps, sums);
        const int64_t first = block * kTableColumns;
        const int64_t last = std::min(first + 2 * kTableColumns, out_features);  // an odd last block ends the columns
        for (int i = 0; i < count; ++i)
          scale_block(sums + i * 2 * kTableColumns, w_sum + first, w_scale + first, row_scale[m0 + i],
                      b != nullptr ? b + first : nullptr, last - first, o + (m0 + i) * out_features + first);
        m0 += count;
      }
    }
  });
  return out;
}

// The most rows of a call that reads the indices (where the chosen set is AVX-512 VNNI); longer calls read
// the int8 blocks. Both give the same numbers. On a Zen 4 EPYC, whole target passes after 300 tokens
// took 0.75-0.77x the blocks' time at one to three rows, 0.85x at four, 0.91x at five, 0.99x at six.
// Inside `hybrid` replies, though, the blocks' passes of four and six rows took 33-36 ms against 46-50
// for one to three rows, and the indices' 40 and 46 ms: with calls of up to six rows on the indices
// `hybrid` was 0.96x / 1.00x / 1.04x (code generation, code editing, prose; paired), up to three
// 1.03x / 1.01x / 1.00x, target-only 1.25-1.31x faster either way. Those fast passes were that
// minute's: this host's memory rate moves by a third within minutes, and from four rows the indices
// are bound by arithmetic (decoding a record costs about four rows' products), the blocks by memory,
// so which is faster moves with it. Choosing the form from timed calls (0.98x / 0.98x / 0.98x and
// 0.98x / 1.00x / 0.96x) or timed passes of four to eight rows (1.02x / 0.99x / 1.02x) did not pay.
// Every call on the records, a prompt's too (what a lean target does), made `hybrid` 0.96x / 0.96x /
// 1.03x and 0.93x / 0.91x / 0.98x: it is a setting for the memory it saves, not the default.
std::atomic<int64_t> indexed_up_to{3};
bool runs_indexed_here() { return std::strcmp(chosen.load()->name, "avx512_vnni") == 0; }
int64_t use_indexed_int8_up_to(int64_t rows) {
  TORCH_CHECK(rows >= 0, "use_indexed_int8_up_to: at least 0 rows, not ", rows);
  return indexed_up_to.exchange(rows);
}

// An int8 linear held both ways: int8_linear's blocks (packed, scales, column sums) and the same int8
// weights as indexed records; a call of few rows reads the records, where this processor can. A linear
// whose blocks are empty (a lean target's) reads its records in every call.
at::Tensor indexed_int8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                               const at::Tensor& column_sums, const at::Tensor& records,
                               const std::optional<at::Tensor>& bias, int64_t out_features) {
  if (packed.numel() == 0) {
    TORCH_CHECK(runs_indexed_here(), "indexed_int8_linear: a linear without int8 blocks needs AVX-512 VNNI, "
                "and the chosen instruction set is ", chosen.load()->name);
    return table_linear(x, records, scales, column_sums, bias, out_features);
  }
  if (runs_indexed_here() && x.dim() == 2 && x.size(0) <= indexed_up_to.load())
    return table_linear(x, records, scales, column_sums, bias, out_features);
  return int8_linear(x, packed, scales, column_sums, bias, out_features);
}

// ---- int4 weights (for drafts): 4-bit columns with a scale and a minimum per 64 inputs ----
//
// w = scale * q + minimum, q in [0, 15]. Activations are quantized per row to 8 bits
// (q in [-127, 127]) and multiplied by the nibbles in exact integer arithmetic.

void quantize_rows_signed(const float* x, int64_t rows, int64_t width, int64_t padded, int8_t* q,
                          float* scale, float* group_sums) {
  const int64_t groups = padded / kInt4Group;
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * width;
    const float peak = row_peak(row, width);
    const float inverse = peak > 0.f ? 127.f / peak : 0.f;
    scale[m] = peak / 127.f;
    int8_t* out = q + m * padded;
    quantize_row<true>(row, width, inverse, 0, out);
    std::fill(out + width, out + padded, static_cast<int8_t>(0));
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (int64_t k = g * kInt4Group; k < (g + 1) * kInt4Group; ++k) sum += out[k];
      group_sums[m * groups + g] = static_cast<float>(sum);
    }
  }
}

// x [M, K] float; packed [N/8, K/64, 8, 8, 4] uint8 (two inputs per byte); scales and minimums
// [N/8, K/64, 8] float16 (stored as int16); bias [N] float or none.
at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& minimums, const std::optional<at::Tensor>& bias, int64_t out_features) {
  const at::Tensor input =
      checked_rows("int4_linear", x, packed, 5, at::kByte, kInt4Group, kInt4Columns, out_features);
  const int64_t rows = input.size(0), width = input.size(1);
  const int64_t blocks = packed.size(0), groups = packed.size(1);
  const int64_t padded = groups * kInt4Group;

  std::vector<int8_t> q(rows * padded);
  std::vector<float> row_scale(rows), group_sums(rows * groups);
  quantize_rows_signed(input.data_ptr<float>(), rows, width, padded, q.data(), row_scale.data(), group_sums.data());

  at::Tensor out = at::empty({rows, out_features}, input.options());
  float* o = out.data_ptr<float>();
  const uint8_t* w = packed.data_ptr<uint8_t>();
  const auto* s = reinterpret_cast<const uint16_t*>(scales.data_ptr<int16_t>());
  const auto* mn = reinterpret_cast<const uint16_t*>(minimums.data_ptr<int16_t>());
  const float* b = bias.has_value() ? bias->data_ptr<float>() : nullptr;

  const Products& products = *chosen.load();
  // A block's outputs: the products (stride floats a row, from its first lane) times the rows' scales, plus bias.
  const auto store_block = [&](int64_t block, int64_t m0, int count, const float* block_out, int64_t stride) {
    const int64_t first = block * kInt4Columns;
    const __m256i kept = lanes_below(std::min(first + kInt4Columns, out_features) - first);
    const __m256 bias8 = b != nullptr ? _mm256_maskload_ps(b + first, kept) : _mm256_setzero_ps();
    for (int i = 0; i < count; ++i) {
      __m256 value = _mm256_mul_ps(_mm256_loadu_ps(block_out + i * stride), _mm256_set1_ps(row_scale[m0 + i]));
      if (b != nullptr) value = _mm256_add_ps(value, bias8);
      _mm256_maskstore_ps(o + (m0 + i) * out_features + first, kept, value);
    }
  };
  const auto rows_at = [&](int64_t m0, int count, const int8_t** chunk, const float** chunk_sums) {
    for (int i = 0; i < count; ++i) {
      chunk[i] = q.data() + (m0 + i) * padded;
      chunk_sums[i] = group_sums.data() + (m0 + i) * groups;
    }
  };
  const int64_t block_bytes = groups * (kInt4Group / 2) * kInt4Columns, block_halves = groups * kInt4Columns;
  if (products.wide_int4 != nullptr && wide_passes.load() && rows >= wide_int4_from.load()) {
    // Two blocks at a time; an odd last block is paired with itself and stored once. A call of one
    // pass (a step's) fetches far ahead; in a prompt's, the later passes over a block find it in cache.
    const bool far = rows <= products.wide_int4_rows;
    at::parallel_for(0, (blocks + 1) / 2, 1, [&](int64_t begin, int64_t end) {
      float block_out[kMostRows * 2 * kInt4Columns];
      const int8_t* chunk[kMostRows];
      const float* chunk_sums[kMostRows];
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t block = 2 * pair;
        const int64_t next = block + 1 < blocks ? block + 1 : block;
        for (int64_t m0 = 0; m0 < rows; m0 += products.wide_int4_rows) {
          const int count = static_cast<int>(std::min<int64_t>(products.wide_int4_rows, rows - m0));
          rows_at(m0, count, chunk, chunk_sums);
          products.wide_int4(count, w + block * block_bytes, w + next * block_bytes, s + block * block_halves,
                             s + next * block_halves, mn + block * block_halves, mn + next * block_halves, chunk,
                             chunk_sums, groups, block_out, far);
          store_block(block, m0, count, block_out, 2 * kInt4Columns);
          if (next != block) store_block(next, m0, count, block_out + kInt4Columns, 2 * kInt4Columns);
        }
      }
    });
    return out;
  }
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    float block_out[kMostRows * kInt4Columns];
    const int8_t* chunk[kMostRows];
    const float* chunk_sums[kMostRows];
    for (int64_t block = begin; block < end; ++block) {
      for (int64_t m0 = 0; m0 < rows; m0 += products.int4_rows) {
        const int count = static_cast<int>(std::min<int64_t>(products.int4_rows, rows - m0));
        rows_at(m0, count, chunk, chunk_sums);
        products.int4(count, w + block * block_bytes, s + block * block_halves, mn + block * block_halves, chunk,
                      chunk_sums, groups, block_out);
        store_block(block, m0, count, block_out, kInt4Columns);
      }
    }
  });
  return out;
}

// ---- RMS norm of each row: one pass per row in a fixed order, whatever the number of rows ----

float row_mean_square(const float* row, int64_t width) {
  __m256 lanes = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= width; k += 8) {
    const __m256 v = _mm256_loadu_ps(row + k);
    lanes = _mm256_fmadd_ps(v, v, lanes);
  }
  alignas(32) float parts[8];
  _mm256_store_ps(parts, lanes);
  float sum = ((parts[0] + parts[1]) + (parts[2] + parts[3])) + ((parts[4] + parts[5]) + (parts[6] + parts[7]));
  for (; k < width; ++k) sum += row[k] * row[k];
  return sum / static_cast<float>(width);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, "rms_norm: float32 only");
  const at::Tensor input = x.contiguous();
  const int64_t width = input.size(-1);
  TORCH_CHECK(weight.numel() == width, "rms_norm: weight does not match the rows");
  const int64_t rows = width == 0 ? 0 : input.numel() / width;
  const at::Tensor norm_weight = weight.contiguous();  // held: its data must outlive the loop
  at::Tensor out = at::empty_like(input);
  const float* in = input.data_ptr<float>();
  const float* w = norm_weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  // One row is too little work to share between threads; many rows (a prompt) are split by row.
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const float* row = in + m * width;
      const float inverse = 1.0f / std::sqrt(row_mean_square(row, width) + static_cast<float>(eps));
      float* out_row = o + m * width;
      for (int64_t k = 0; k < width; ++k) out_row[k] = (row[k] * inverse) * w[k];
    }
  });
  return out;
}

// ---- attention of a few new rows: rotary and the cache write, then each row over its own prefix ----
//
// A row's numbers depend only on its own query and the keys and values before it, computed in a
// fixed order, so a verify block's rows equal single steps bit for bit (as the linears above).
//
// The cache holds float32 or float16 (a Half: its bits). A float16 cache is written rounded to
// nearest and widened exactly on every read, so a row reads the same numbers whichever pass wrote
// them and the property holds; it takes half the memory and half the bytes a row's attention reads.

using Half = uint16_t;

// Eight float16 elements as float32 lanes.
inline __m256 load8(const Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// A key or value row of dim floats (a multiple of 8) into the cache, rounded to nearest for float16.
inline void store_row(const float* row, float* out, int64_t dim) { std::memcpy(out, row, dim * sizeof(float)); }
inline void store_row(const float* row, Half* out, int64_t dim) {
  for (int64_t i = 0; i < dim; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(row + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The checks both attention ops make of the cache: matching contiguous [kv_heads, capacity, dim]
// float32 or float16 tensors with room for the new rows at length .. length + rows - 1.
void check_cache(const char* op, const at::Tensor& keys, const at::Tensor& values, int64_t length, int64_t rows) {
  TORCH_CHECK(keys.dim() == 3 && keys.is_contiguous() && values.is_contiguous() && keys.sizes() == values.sizes() &&
                  keys.scalar_type() == values.scalar_type() &&
                  (keys.scalar_type() == at::kFloat || keys.scalar_type() == at::kHalf),
              op, ": keys and values must be matching contiguous [kv_heads, capacity, dim] float32 or float16");
  TORCH_CHECK(keys.scalar_type() == at::kFloat || keys.size(2) % 8 == 0, op,
              ": a float16 cache needs a head size that is a multiple of 8, not ", keys.size(2));
  TORCH_CHECK(length >= 0 && length + rows <= keys.size(1), op, ": the cache is too short");
}

template <typename Element>
Element* cache_data(const at::Tensor& cache) {
  return reinterpret_cast<Element*>(cache.data_ptr());
}

// qkv [M, (H + 2G) * D] projections; cos and sin [M, D], sin signed so that
// rotate(x) = x * cos + roll(x, D / 2) * sin; keys and values [G, capacity, D], the new rows written
// at length .. length + M - 1. Returns the rotated queries times scale, [M, H, D].
at::Tensor rotate_into_cache(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor keys,
                             at::Tensor values, int64_t length, int64_t heads, double scale) {
  const at::Tensor projected = qkv.contiguous(), c = cos.contiguous(), s = sin.contiguous();
  const int64_t rows = projected.size(0);
  check_cache("rotate_into_cache", keys, values, length, rows);
  const int64_t kv_heads = keys.size(0), capacity = keys.size(1), dim = keys.size(2), half = dim / 2;
  const int64_t width = (heads + 2 * kv_heads) * dim;
  TORCH_CHECK(projected.dim() == 2 && projected.scalar_type() == at::kFloat && projected.size(1) == width,
              "rotate_into_cache: qkv must be [rows, (heads + 2 * kv_heads) * dim] float32");
  TORCH_CHECK(c.numel() == rows * dim && s.numel() == rows * dim && c.scalar_type() == at::kFloat &&
                  s.scalar_type() == at::kFloat && dim % 2 == 0,
              "rotate_into_cache: cos and sin must hold rows * dim float32 values");
  at::Tensor q = at::empty({rows, heads, dim}, projected.options());
  const float* in = projected.data_ptr<float>();
  float* q_out = q.data_ptr<float>();
  const float factor = static_cast<float>(scale);
  const bool float16 = keys.scalar_type() == at::kHalf;
  std::vector<float> key(float16 ? dim : 0);  // a rotated key before it is rounded into a float16 cache
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = in + m * width;
    const float* row_cos = c.data_ptr<float>() + m * dim;
    const float* row_sin = s.data_ptr<float>() + m * dim;
    auto rotate = [&](const float* x, float* out, float times) {
      for (int64_t i = 0; i < dim; ++i) {
        const float rolled = x[i < half ? i + half : i - half];
        out[i] = (x[i] * row_cos[i] + rolled * row_sin[i]) * times;
      }
    };
    for (int64_t h = 0; h < heads; ++h) rotate(row + h * dim, q_out + (m * heads + h) * dim, factor);
    for (int64_t g = 0; g < kv_heads; ++g) {
      const int64_t slot = (g * capacity + length + m) * dim;
      const float* value = row + (heads + kv_heads + g) * dim;
      if (float16) {
        rotate(row + (heads + g) * dim, key.data(), 1.0f);
        store_row(key.data(), cache_data<Half>(keys) + slot, dim);
        store_row(value, cache_data<Half>(values) + slot, dim);
      } else {
        rotate(row + (heads + g) * dim, cache_data<float>(keys) + slot, 1.0f);
        store_row(value, cache_data<float>(values) + slot, dim);
      }
    }
  }
  return q;
}

// e^x for x <= 0 to about one part in 10^7: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor
// polynomial to degree 7, times 2^n through the exponent bits. Below -87 it gives e^-87, not 0.
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2 in two parts: exact n * high
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// A key's score is the sum of its lanes, always as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)): the
// eight-key path below adds in that order too, so a score does not depend on which path took it.
float lanes_sum(__m256 v) {
  alignas(32) float parts[8];
  _mm256_store_ps(parts, v);
  return ((parts[0] + parts[1]) + (parts[2] + parts[3])) + ((parts[4] + parts[5]) + (parts[6] + parts[7]));
}

// A query's dot product with a key, in eight lanes: each lane sums its column of the head's 8-wide
// chunks, the even chunks and the odd ones apart, then the two sums added. Two sums halve the chain
// of dependent multiply-adds, and on 512-bit registers one register holds both (an even chunk and
// the odd one after it side by side; dot_lanes_wide), so both give the same bits. C (the head size
// / 8, even) is a template parameter: with it known, the loops over a head unroll, which halves the
// attention's time.
template <int C>
inline __m256 dot_lanes(const float* q, const float* key) {
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  for (int d = 0; d < 8 * C; d += 16) {
    even = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(key + d), even);
    odd = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(key + d + 8), odd);
  }
  return _mm256_add_ps(even, odd);
}

template <int C>
__attribute__((target("avx512f"))) inline __m256 dot_lanes_wide(const float* q, const float* key) {
  __m512 sums = _mm512_setzero_ps();
  for (int d = 0; d < 8 * C; d += 16) sums = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(key + d), sums);
  const __m256 odd = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1));
  return _mm256_add_ps(_mm512_castps512_ps256(sums), odd);
}

// Eight keys' dot products (lanes) reduced to their scores as lanes_sum does: hadd pairs
// neighbouring lanes, so after two rounds each 128-bit half holds (0+1)+(2+3) or (4+5)+(6+7) of four
// keys, and the last add joins the halves.
inline __m256 eight_scores(const __m256* d) {
  const __m256 pairs03 = _mm256_hadd_ps(_mm256_hadd_ps(d[0], d[1]), _mm256_hadd_ps(d[2], d[3]));
  const __m256 pairs47 = _mm256_hadd_ps(_mm256_hadd_ps(d[4], d[5]), _mm256_hadd_ps(d[6], d[7]));
  const __m256 low = _mm256_permute2f128_ps(pairs03, pairs47, 0x20);
  const __m256 high = _mm256_permute2f128_ps(pairs03, pairs47, 0x31);
  return _mm256_add_ps(low, high);
}

// sums[0 : 8C] += sum over t in [first, last) of weights[t] * values[t, 0 : 8C], in the order of t:
// C independent sums, so the loop runs at the FMA units' rate, not their latency. A sum carried
// through memory between calls takes the same steps as one kept in registers.
template <int C>
void add_weighted_values(const float* weights, const float* values, int64_t first, int64_t last, int64_t dim,
                         float* sums) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_loadu_ps(sums + 8 * c);
  for (int64_t t = first; t < last; ++t) {
    const __m256 weight = _mm256_set1_ps(weights[t]);
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(values + t * dim + 8 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(sums + 8 * c, acc[c]);
}

// The same sums on 512-bit registers, Z sixteen-lane sums at a time: each lane still adds its terms
// one by one in the order of t, so every sum is the same bit for bit, in half the instructions.
template <int Z>
__attribute__((target("avx512f"))) void add_weighted_values_wide(const float* weights, const float* values,
                                                                 int64_t first, int64_t last, int64_t dim,
                                                                 float* sums) {
  __m512 acc[Z];
  for (int c = 0; c < Z; ++c) acc[c] = _mm512_loadu_ps(sums + 16 * c);
  for (int64_t t = first; t < last; ++t) {
    const __m512 weight = _mm512_set1_ps(weights[t]);
    for (int c = 0; c < Z; ++c) acc[c] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(values + t * dim + 16 * c), acc[c]);
  }
  for (int c = 0; c < Z; ++c) _mm512_storeu_ps(sums + 16 * c, acc[c]);
}

// Whether the attention takes its scores and sums its values on 512-bit registers: where the chosen
// instruction set has them (use_instruction_set("avx2") gives the 256-bit loops, for the tests that
// compare the two).
bool wide_attention() { return chosen.load(std::memory_order_relaxed)->wide_int8 != nullptr; }

// Softmax of scores[0 : stop] in place (padded with zeros to a multiple of 8); returns
// 1 / the sum of the exponentials, which the weighted values are multiplied by.
float softmax_unscaled(float* scores, int64_t stop) {
  const int64_t padded = (stop + 7) / 8 * 8;
  std::fill(scores + stop, scores + padded, -std::numeric_limits<float>::infinity());
  __m256 peaks = _mm256_loadu_ps(scores);
  for (int64_t t = 8; t < padded; t += 8) peaks = _mm256_max_ps(peaks, _mm256_loadu_ps(scores + t));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, peaks);
  const float peak = *std::max_element(lanes, lanes + 8);
  __m256 total = _mm256_setzero_ps();
  const __m256 shift = _mm256_set1_ps(peak);
  for (int64_t t = 0; t < padded; t += 8) {
    // Lanes past stop get e^-87 from the clamp: zero them so they add nothing.
    const __m256 live = _mm256_castsi256_ps(lanes_below(stop - t));
    const __m256 e = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + t), shift)), live);
    _mm256_storeu_ps(scores + t, e);
    total = _mm256_add_ps(total, e);
  }
  return 1.0f / lanes_sum(total);
}

constexpr int64_t kValueBlock = 64;  // values per pass over a group's heads: 16 KB of half a 128-wide head (32 KB wide)

// A query row of one head: its rotated, scaled q [8C], how many cached positions from the first it
// attends to, where its output [8C] goes, and for a branch row (a sibling of a drafted token, see
// attend_rows) the slot of its own key and value, which it attends to last, as if at position stop;
// -1 for a row whose own slot is position stop - 1.
struct Query {
  const float* q;
  int64_t stop;
  float* out;
  int64_t own = -1;

  int64_t span() const { return stop + (own >= 0); }
};

// out += the softmax weights times the values for each query, Width floats of each at a time by Add
// (add_weighted_values or its wide form): a value block at a time for every query, in the order of
// the positions, then a branch's own value last, weighted by its score at position stop.
using AddWeightedValues = void (*)(const float*, const float*, int64_t, int64_t, int64_t, float*);

// Positions first .. last - 1 of a [positions, dim] cache, Width columns from column d, as float32
// rows row_stride apart: a float32 cache's own, a float16 cache's widened into scratch (Width floats a
// row), once for all the queries that read them rather than once a query.
template <int64_t Width>
inline const float* float_rows(const float* cache, int64_t first, int64_t last, int64_t d, int64_t dim, float* scratch,
                               int64_t& row_stride) {
  row_stride = dim;
  return cache + first * dim + d;
}

template <int64_t Width>
inline const float* float_rows(const Half* cache, int64_t first, int64_t last, int64_t d, int64_t dim, float* scratch,
                               int64_t& row_stride) {
  row_stride = Width;
  for (int64_t t = first; t < last; ++t)
    for (int64_t c = 0; c < Width; c += 8) _mm256_storeu_ps(scratch + (t - first) * Width + c, load8(cache + t * dim + d + c));
  return scratch;
}

template <typename Element, int64_t Width, AddWeightedValues Add>
void weigh_values(const Query* queries, int64_t count, const Element* values, const float* scores, int64_t stride,
                  int64_t longest, int64_t dim) {
  alignas(64) float scratch[kValueBlock * Width];
  int64_t row = 0;
  for (int64_t d = 0; d < dim; d += Width) {
    for (int64_t first = 0; first < longest; first += kValueBlock) {
      const int64_t last = std::min(longest, first + kValueBlock);
      const float* block = float_rows<Width>(values, first, last, d, dim, scratch, row);
      for (int64_t i = 0; i < count; ++i)
        if (first < queries[i].stop)
          Add(scores + i * stride + first, block, 0, std::min(queries[i].stop, last) - first, row, queries[i].out + d);
    }
    for (int64_t i = 0; i < count; ++i)
      if (queries[i].own >= 0) {
        const float* own = float_rows<Width>(values, queries[i].own, queries[i].own + 1, d, dim, scratch, row);
        Add(scores + i * stride + queries[i].stop, own, 0, 1, row, queries[i].out + d);
      }
  }
}

// Each query's scores against the keys it sees, eight keys at a time, and a branch's own key at
// position stop, as it would score there: a score does not depend on its path. Dot is dot_lanes or
// dot_lanes_wide; the loop is inlined into score_keys or score_keys_wide, and only the latter, compiled
// for AVX-512 and flattened, may (and must, to be fast) inline the 512-bit dot product.
using DotLanes = __m256 (*)(const float*, const float*);

template <int C, typename Element, DotLanes Dot>
__attribute__((always_inline)) inline void score_keys_by(const Query* queries, int64_t count, const Element* keys,
                                                         float* scores, int64_t stride, int64_t longest) {
  constexpr int64_t dim = 8 * C;
  alignas(64) float scratch[8 * dim];
  int64_t row = 0;
  for (int64_t t = 0; t < longest; t += 8) {
    const float* block = float_rows<dim>(keys, t, std::min(t + 8, longest), 0, dim, scratch, row);
    for (int64_t i = 0; i < count; ++i) {
      float* own = scores + i * stride;
      if (t + 8 <= queries[i].stop) {
        __m256 d[8];
        for (int j = 0; j < 8; ++j) d[j] = Dot(queries[i].q, block + j * row);
        _mm256_storeu_ps(own + t, eight_scores(d));
      } else {
        for (int64_t u = t; u < queries[i].stop; ++u) own[u] = lanes_sum(Dot(queries[i].q, block + (u - t) * row));
      }
    }
  }
  for (int64_t i = 0; i < count; ++i)
    if (queries[i].own >= 0) {
      const float* key = float_rows<dim>(keys, queries[i].own, queries[i].own + 1, 0, dim, scratch, row);
      scores[i * stride + queries[i].stop] = lanes_sum(Dot(queries[i].q, key));
    }
}

template <int C, typename Element>
void score_keys(const Query* queries, int64_t count, const Element* keys, float* scores, int64_t stride,
                int64_t longest) {
  score_keys_by<C, Element, dot_lanes<C>>(queries, count, keys, scores, stride, longest);
}

template <int C, typename Element>
__attribute__((target("avx512f"), flatten)) void score_keys_wide(const Query* queries, int64_t count,
                                                                 const Element* keys, float* scores, int64_t stride,
                                                                 int64_t longest) {
  score_keys_by<C, Element, dot_lanes_wide<C>>(queries, count, keys, scores, stride, longest);
}

// softmax(q k^T) v for `count` queries that share one key and value head [*, 8C]: the heads of a
// group, for every row of a block. Each block of keys and of values is read from memory once and
// used by every query while it is in cache, instead of once per query; each query's numbers take
// the same steps in the same order as it would alone. scores holds count * (longest stop, padded
// to 8) floats, inverse count.
template <int C, typename Element>
void attend_group(const Query* queries, int64_t count, const Element* keys, const Element* values, float* scores,
                  float* inverse) {
  constexpr int64_t dim = 8 * C;
  constexpr int kSums = std::min(C, 8);  // sums at a time: sixteen would not leave a register for the weight
  int64_t longest = 0;
  for (int64_t i = 0; i < count; ++i) longest = std::max(longest, queries[i].span());
  const int64_t stride = (longest + 7) / 8 * 8;
  const bool wide = wide_attention();
  if (wide)
    score_keys_wide<C, Element>(queries, count, keys, scores, stride, longest);
  else
    score_keys<C, Element>(queries, count, keys, scores, stride, longest);
  for (int64_t i = 0; i < count; ++i) {
    inverse[i] = softmax_unscaled(scores + i * stride, queries[i].span());
    std::fill(queries[i].out, queries[i].out + dim, 0.0f);
  }
  if (wide)
    weigh_values<Element, dim, add_weighted_values_wide<C / 2>>(queries, count, values, scores, stride, longest, dim);
  else
    weigh_values<Element, 8 * kSums, add_weighted_values<kSums>>(queries, count, values, scores, stride, longest, dim);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t d = 0; d < dim; d += 8)
      _mm256_storeu_ps(queries[i].out + d, _mm256_mul_ps(_mm256_loadu_ps(queries[i].out + d), _mm256_set1_ps(inverse[i])));
}

constexpr int64_t kMostQueries = 32;  // queries per work item: bounds an item's scores for a long prompt

// Work items are (key/value head, part of its queries), the queries being every row's heads of the
// group: as few parts as still give every thread an item and keep each within kMostQueries.
template <int C, typename Element>
void attend_heads(const float* query, const Element* k, const Element* v, int64_t length, int64_t rows, int64_t heads,
                  int64_t kv_heads, int64_t capacity, const int64_t* visible, float* o) {
  constexpr int64_t dim = 8 * C;
  const int64_t groups = heads / kv_heads, queries = rows * groups;
  const int64_t parts = std::min(queries, std::max((at::get_num_threads() + kv_heads - 1) / kv_heads,
                                                   (queries + kMostQueries - 1) / kMostQueries));
  const int64_t per_part = (queries + parts - 1) / parts;
  at::parallel_for(0, kv_heads * parts, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(per_part * ((length + rows + 7) / 8 * 8)), inverse(per_part);
    std::vector<Query> items(per_part);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item / parts, part = item % parts;
      const int64_t first = part * per_part, count = std::min(per_part, queries - first);
      for (int64_t i = 0; i < count; ++i) {
        // Row-major: row m's heads of the group, then row m + 1's.
        const int64_t m = (first + i) / groups, h = g * groups + (first + i) % groups;
        const int64_t seen = visible != nullptr ? visible[m] : length + m;
        items[i] = seen == length + m ? Query{query + (m * heads + h) * dim, length + m + 1, o + (m * heads + h) * dim}
                                      : Query{query + (m * heads + h) * dim, seen, o + (m * heads + h) * dim, length + m};
      }
      if (count > 0)
        attend_group<C, Element>(items.data(), count, k + g * capacity * dim, v + g * capacity * dim, scores.data(),
                        inverse.data());
    }
  });
}

// q [M, H, D] (rotated and scaled) of the rows at length .. length + M - 1, whose keys and values are
// already in the cache [G, capacity, D]. Row m attends to the first length + m + 1 cached positions;
// with visible [M] (int64), row m attends to the first visible[m] positions and then to its own slot
// length + m: a branch, a token standing in for the one at position visible[m] and seeing only what
// came before it, computes what it would as the row at that position, bit for bit.
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, int64_t length,
                       const std::optional<at::Tensor>& visible) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.is_contiguous(),
              "attend_rows: q must be a contiguous [rows, heads, dim] float32 tensor");
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  check_cache("attend_rows", keys, values, length, rows);
  const int64_t kv_heads = keys.size(0), capacity = keys.size(1);
  TORCH_CHECK(keys.size(2) == dim && kv_heads > 0 && heads % kv_heads == 0, "attend_rows: head shapes do not match");
  TORCH_CHECK(dim == 16 || dim == 32 || dim == 64 || dim == 128, "attend_rows: head size ", dim,
              " is not one of 16, 32, 64, 128");
  const int64_t* seen = nullptr;
  if (visible.has_value()) {
    TORCH_CHECK(visible->scalar_type() == at::kLong && visible->is_contiguous() && visible->numel() == rows,
                "attend_rows: visible must be a contiguous int64 tensor of one count per row");
    seen = visible->data_ptr<int64_t>();
    for (int64_t m = 0; m < rows; ++m)
      TORCH_CHECK(seen[m] >= 0 && seen[m] <= length + m, "attend_rows: row ", m, " cannot see ", seen[m],
                  " positions: it stands at ", length + m);
  }
  at::Tensor out = at::empty({rows, heads * dim}, q.options());
  const float* query = q.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const auto attend = [&](const auto* k, const auto* v) {
    switch (dim) {
      case 16: attend_heads<2>(query, k, v, length, rows, heads, kv_heads, capacity, seen, o); break;
      case 32: attend_heads<4>(query, k, v, length, rows, heads, kv_heads, capacity, seen, o); break;
      case 64: attend_heads<8>(query, k, v, length, rows, heads, kv_heads, capacity, seen, o); break;
      default: attend_heads<16>(query, k, v, length, rows, heads, kv_heads, capacity, seen, o); break;
    }
  };
  if (keys.scalar_type() == at::kHalf)
    attend(cache_data<const Half>(keys), cache_data<const Half>(values));
  else
    attend(cache_data<const float>(keys), cache_data<const float>(values));
  return out;
}

// ---- SwiGLU between gate_up and down: silu(gate) * up, gate and up the two halves of each row ----

at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.scalar_type() == at::kFloat && gate_up.size(1) % 16 == 0,
              "silu_mul: gate_up must be a [rows, 2 * width] float32 tensor, width a multiple of 8");
  const at::Tensor input = gate_up.contiguous();
  const int64_t rows = input.size(0), width = input.size(1) / 2;
  at::Tensor out = at::empty({rows, width}, input.options());
  const float* in = input.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // Each element on its own, so the threads may split the columns: a step's rows, serial, cost
  // about 4 us each per layer.
  at::parallel_for(0, width / 8, 128, [&](int64_t begin, int64_t end) {
    for (int64_t m = 0; m < rows; ++m) {
      const float* gate = in + m * 2 * width;
      const float* up = gate + width;
      for (int64_t k = 8 * begin; k < 8 * end; k += 8) {
        const __m256 g = _mm256_loadu_ps(gate + k);
        // sigmoid(g) from e = e^-|g| <= 1: 1 / (1 + e) for g >= 0, e / (1 + e) below.
        const __m256 e = exp_nonpositive(_mm256_or_ps(g, sign));
        const __m256 numerator = _mm256_blendv_ps(one, e, g);  // g's sign bit picks e
        const __m256 sigmoid = _mm256_div_ps(numerator, _mm256_add_ps(one, e));
        _mm256_storeu_ps(o + m * width + k, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + k)));
      }
    }
  });
  return out;
}

// ---- a whole decoder layer over a short block, in the calls the Kernel* layers make one by one ----

at::Tensor kernel_linear(int64_t kind, const at::Tensor& x, const at::Tensor* parts, const at::Tensor& bias,
                         int64_t out_features) {
  const std::optional<at::Tensor> b = bias.numel() ? std::optional<at::Tensor>(bias) : std::nullopt;
  TORCH_CHECK(kind == 8 || kind == 4 || kind == 9,
              "decoder_layer: a linear's kind is 8 (int8), 4 (int4) or 9 (indexed int8), not ", kind);
  if (kind == 9) return indexed_int8_linear(x, parts[0], parts[1], parts[2], parts[3], b, out_features);
  return kind == 8 ? int8_linear(x, parts[0], parts[1], parts[2], b, out_features)
                   : int4_linear(x, parts[0], parts[1], parts[2], b, out_features);
}

// The same functions in the same order as the layer's modules call them, so the numbers are the same
// bit for bit; one call instead of about ten saves the interpreter between them (no TorchScript needed).
// Linears in the order qkv, out_proj, gate_up, down: kinds[i], weights[4i .. 4i + 3] (packed, scales,
// column sums or minimums, and an indexed int8 linear's records, else an empty tensor), biases[i]
// (empty: none), out_features[i].
at::Tensor decoder_layer(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor keys,
                         at::Tensor values, int64_t length, int64_t heads, double scale, double eps,
                         const at::Tensor& norm_in, const at::Tensor& norm_post, at::IntArrayRef kinds,
                         at::TensorList weights, at::TensorList biases, at::IntArrayRef out_features,
                         const std::optional<at::Tensor>& visible) {
  TORCH_CHECK(kinds.size() == 4 && weights.size() == 16 && biases.size() == 4 && out_features.size() == 4,
              "decoder_layer: four linears (qkv, out_proj, gate_up, down), four weight tensors each");
  const auto linear = [&](size_t i, const at::Tensor& in) {
    return kernel_linear(kinds[i], in, weights.data() + 4 * i, biases[i], out_features[i]);
  };
  const at::Tensor q = rotate_into_cache(linear(0, rms_norm(x, norm_in, eps)), cos, sin, keys, values, length, heads,
                                         scale);
  const at::Tensor h = x + linear(1, attend_rows(q, keys, values, length, visible));
  return h + linear(3, silu_mul(linear(2, rms_norm(h, norm_post, eps))));
}

// Every layer of a short block in one call, layer after layer as decoder_layer runs each: per layer
// two norm weights (norms[2i], norms[2i + 1]), four kinds, sixteen weight tensors and four biases, the
// out_features shared by all. A call per layer cost 20-60 us each in the interpreter and in
// converting its arguments (0.5 ms of a 0.5B draft's 8 ms step, 1.6 ms of a 1.5B target's 43 ms).
at::Tensor decoder_layers(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::TensorList keys,
                          at::TensorList values, int64_t length, int64_t heads, double scale, double eps,
                          at::TensorList norms, at::IntArrayRef kinds, at::TensorList weights, at::TensorList biases,
                          at::IntArrayRef out_features, const std::optional<at::Tensor>& visible) {
  const size_t layers = keys.size();
  TORCH_CHECK(values.size() == layers && norms.size() == 2 * layers && kinds.size() == 4 * layers &&
                  weights.size() == 16 * layers && biases.size() == 4 * layers,
              "decoder_layers: per layer a key and a value cache, two norms, four kinds, sixteen weights, four biases");
  at::Tensor h = x;
  for (size_t i = 0; i < layers; ++i)
    h = decoder_layer(h, cos, sin, keys[i], values[i], length, heads, scale, eps, norms[2 * i], norms[2 * i + 1],
                      kinds.slice(4 * i, 4), weights.slice(16 * i, 16), biases.slice(4 * i, 4), out_features, visible);
  return h;
}

}  // namespace

TORCH_LIBRARY(specdec, m) {
  m.def("int8_linear(Tensor x, Tensor packed, Tensor scales, Tensor column_sums, Tensor? bias, int out_features) -> Tensor",
        &int8_linear);
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scales, Tensor minimums, Tensor? bias, int out_features) -> Tensor",
        &int4_linear);
  m.def("indexed_int8_linear(Tensor x, Tensor packed, Tensor scales, Tensor column_sums, Tensor records, Tensor? bias, "
        "int out_features) -> Tensor",
        &indexed_int8_linear);
  m.def("use_indexed_int8_up_to(int rows) -> int", &use_indexed_int8_up_to);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
  m.def("rotate_into_cache(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, int length, "
        "int heads, float scale) -> Tensor",
        &rotate_into_cache);
  m.def("attend_rows(Tensor q, Tensor keys, Tensor values, int length, Tensor? visible=None) -> Tensor", &attend_rows);
  m.def("silu_mul(Tensor gate_up) -> Tensor", &silu_mul);
  m.def("instruction_sets() -> str[]", &instruction_sets);
  m.def("instruction_set() -> str", &instruction_set);
  m.def("use_instruction_set(str name) -> ()", &use_instruction_set);
  m.def("use_wide_passes(bool on) -> bool", &use_wide_passes);
  m.def("use_wide_passes_from(int rows) -> int", &use_wide_passes_from);
  m.def("use_wide_int4_passes_from(int rows) -> int", &use_wide_int4_passes_from);
  m.def("use_short_pass_prefetch(int setting) -> int", &use_short_pass_prefetch);
  m.def("decoder_layers(Tensor x, Tensor cos, Tensor sin, Tensor(a!)[] keys, Tensor(b!)[] values, int length, "
        "int heads, float scale, float eps, Tensor[] norms, int[] kinds, Tensor[] weights, Tensor[] biases, "
        "int[] out_features, Tensor? visible=None) -> Tensor",
        &decoder_layers);
}
