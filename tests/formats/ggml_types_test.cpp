// ggml block decoders (formats/ggml_types.h) on hand-made blocks whose values
// follow directly from the format definition.
#include "formats/ggml_types.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/numeric.h"

using namespace futr;

namespace {
void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(uint8_t(v & 0xff));
  b.push_back(uint8_t(v >> 8));
}
}  // namespace

TEST(GgmlTypes, SizeTable) {
  EXPECT_EQ(ggml_type_info(3)->block_bytes, 20u);
  EXPECT_EQ(ggml_type_info(2)->block_bytes, 18u);
  EXPECT_EQ(ggml_type_info(8)->block_bytes, 34u);
  EXPECT_EQ(ggml_type_info(14)->block, 256u);
  EXPECT_FALSE(ggml_type_info(14)->supported);
  EXPECT_EQ(ggml_type_info(4), nullptr);
  EXPECT_EQ(ggml_type_info(12345), nullptr);
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(99), "type 99");
}

TEST(GgmlTypes, Q4_0LowNibblesFirstHalf) {
  // d = 0.5; byte j holds q = j (low nibble, element j) and 15 - j (high, element j + 16).
  std::vector<uint8_t> b;
  put16(b, float_to_fp16(0.5f));
  for (int j = 0; j < 16; ++j) b.push_back(uint8_t(j | ((15 - j) << 4)));
  std::vector<float> y(32);
  dequantize_ggml(*ggml_type_info(2), b, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[size_t(j + 16)], (15 - j - 8) * 0.5f) << j;
  }
}

TEST(GgmlTypes, Q4_1ScaleAndMin) {
  // Two blocks: d = 0.25, m = -1 and d = 2, m = 3.
  std::vector<uint8_t> b;
  for (auto [d, m] : {std::pair{0.25f, -1.0f}, std::pair{2.0f, 3.0f}}) {
    put16(b, float_to_fp16(d));
    put16(b, float_to_fp16(m));
    for (int j = 0; j < 16; ++j) b.push_back(uint8_t((j % 16) | (((j + 3) % 16) << 4)));
  }
  std::vector<float> y(64);
  dequantize_ggml(*ggml_type_info(3), b, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], j * 0.25f - 1.0f);
    EXPECT_EQ(y[size_t(j + 16)], ((j + 3) % 16) * 0.25f - 1.0f);
    EXPECT_EQ(y[size_t(32 + j)], j * 2.0f + 3.0f);
    EXPECT_EQ(y[size_t(48 + j)], ((j + 3) % 16) * 2.0f + 3.0f);
  }
}

TEST(GgmlTypes, Q8_0Signed) {
  std::vector<uint8_t> b;
  put16(b, float_to_fp16(0.125f));
  for (int j = 0; j < 32; ++j) b.push_back(uint8_t(int8_t(j * 8 - 128)));
  std::vector<float> y(32);
  dequantize_ggml(*ggml_type_info(8), b, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[size_t(j)], float(j * 8 - 128) * 0.125f);
}

TEST(GgmlTypes, HalfFormats) {
  std::vector<uint8_t> f16, bf16;
  const std::vector<float> v = {1.0f, -2.5f, 0.0f, 65504.0f, 1.0f / 1024};
  for (float x : v) put16(f16, float_to_fp16(x)), put16(bf16, float_to_bf16(x));
  std::vector<float> y(v.size());
  dequantize_ggml(*ggml_type_info(1), f16, y);
  EXPECT_EQ(y, v);
  dequantize_ggml(*ggml_type_info(30), bf16, y);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(y[i], round_bf16(v[i]));
}
