// Rows of a GGUF quantized embedding table, registered as torch.ops.specdec.gguf_rows: the few rows a
// decode step looks up, dequantized in one call instead of gguf's dozen numpy calls (about 0.3 ms a
// step, a few percent of a draft's). Each value comes out of the same float32 operations, in the same
// order, as gguf.dequantize, so the rows are the same bits as the table the model was loaded with.
#include <ATen/ATen.h>
#include <immintrin.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>

namespace {

constexpr int64_t kQ5_0 = 6;   // GGMLQuantizationType.Q5_0: 32 values in 22 bytes
constexpr int64_t kQ4_K = 12;  // GGMLQuantizationType.Q4_K: 256 values in 144 bytes

// float16 to float32 is exact, as numpy's astype is.
float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

// d (float16), the 32 high bits, 16 bytes of low nibbles: value i = d * ((low | high << 4) - 16),
// low i from byte i % 16 (its low nibble below 16, its high nibble from 16).
void q5_0_block(const uint8_t* block, float* out) {
  const float d = half_to_float(block);
  uint32_t high;
  std::memcpy(&high, block + 2, sizeof high);
  const uint8_t* low = block + 6;
  for (int i = 0; i < 32; ++i) {
    const int nibble = i < 16 ? low[i] & 0x0F : low[i - 16] >> 4;
    const int q = (nibble | static_cast<int>(((high >> i) & 1) << 4)) - 16;
    out[i] = d * static_cast<float>(q);
  }
}

// d and dmin (float16), twelve bytes of 6-bit scales and minimums for 8 sub-blocks of 32, then 128
// bytes of nibbles: sub-block 2j the low nibbles of bytes 32j .. 32j + 31, sub-block 2j + 1 their high
// nibbles. value = (d * scale) * q - (dmin * minimum).
void q4_k_block(const uint8_t* block, float* out) {
  const float d = half_to_float(block), dmin = half_to_float(block + 2);
  const uint8_t* packed = block + 4;
  const uint8_t* nibbles = block + 16;
  for (int j = 0; j < 8; ++j) {
    int scale, minimum;
    if (j < 4) {
      scale = packed[j] & 0x3F;
      minimum = packed[j + 4] & 0x3F;
    } else {
      scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 2) & 0x30);
      minimum = (packed[j + 4] >> 4) | ((packed[j] >> 2) & 0x30);
    }
    const float times = d * static_cast<float>(scale), less = dmin * static_cast<float>(minimum);
    const uint8_t* bytes = nibbles + 32 * (j / 2);
    for (int i = 0; i < 32; ++i) {
      const int q = j % 2 == 0 ? bytes[i] & 0x0F : bytes[i] >> 4;
      const float scaled = times * static_cast<float>(q);
      out[32 * j + i] = scaled - less;
    }
  }
}

// blocks [rows, bytes per row] uint8, a row's quantized blocks one after another; ids [n] int64.
// Returns [n, values per row] float32.
at::Tensor gguf_rows(const at::Tensor& blocks, const at::Tensor& ids, int64_t quant_type) {
  TORCH_CHECK(quant_type == kQ5_0 || quant_type == kQ4_K, "gguf_rows: quantization type ", quant_type,
              " is not Q5_0 (6) or Q4_K (12)");
  TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == at::kByte && blocks.is_contiguous(),
              "gguf_rows: blocks must be a contiguous [rows, bytes] uint8 tensor");
  const int64_t values_per_block = quant_type == kQ5_0 ? 32 : 256;
  const int64_t bytes_per_block = quant_type == kQ5_0 ? 22 : 144;
  const int64_t row_bytes = blocks.size(1), table_rows = blocks.size(0);
  TORCH_CHECK(row_bytes % bytes_per_block == 0, "gguf_rows: a row of ", row_bytes, " bytes is not whole blocks");
  const at::Tensor index = ids.to(at::kLong).contiguous();
  const int64_t count = index.numel(), width = row_bytes / bytes_per_block * values_per_block;
  at::Tensor out = at::empty({count, width}, blocks.options().dtype(at::kFloat));
  const uint8_t* table = blocks.data_ptr<uint8_t>();
  const int64_t* id = index.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < count; ++r) {
    TORCH_CHECK(id[r] >= 0 && id[r] < table_rows, "gguf_rows: id ", id[r], " is outside the table's ", table_rows,
                " rows");
    const uint8_t* row = table + id[r] * row_bytes;
    for (int64_t b = 0; b < row_bytes / bytes_per_block; ++b) {
      float* values = o + r * width + b * values_per_block;
      if (quant_type == kQ5_0)
        q5_0_block(row + b * bytes_per_block, values);
      else
        q4_k_block(row + b * bytes_per_block, values);
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("gguf_rows(Tensor blocks, Tensor ids, int quant_type) -> Tensor", &gguf_rows);
}
