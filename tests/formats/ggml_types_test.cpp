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
  EXPECT_TRUE(ggml_type_info(14)->supported);
  // ggml's sizeof(block_*): Q5_0/Q5_1 22/24, Q2_K..Q8_K 84, 110, 144, 176, 210, 292.
  const std::pair<uint32_t, uint32_t> sizes[] = {{6, 22},   {7, 24},   {10, 84},  {11, 110},
                                                 {12, 144}, {13, 176}, {14, 210}, {15, 292}};
  for (auto [id, bytes] : sizes) {
    EXPECT_EQ(ggml_type_info(id)->block_bytes, bytes) << ggml_type_name(id);
    EXPECT_TRUE(ggml_type_info(id)->supported) << ggml_type_name(id);
  }
  EXPECT_EQ(ggml_type_info(9)->block_bytes, 36u);  // Q8_1: fp16 d, fp16 s, int8 q[32]
  EXPECT_FALSE(ggml_type_info(9)->supported);
  EXPECT_FALSE(ggml_type_info(16)->supported);  // IQ2_XXS
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

TEST(GgmlTypes, Q5_0HighBitFromQh) {
  // d = 0.5, qh = 0xAAAA5555: element j has bit 4 set when bit j of qh is.
  std::vector<uint8_t> b;
  put16(b, float_to_fp16(0.5f));
  const uint32_t qh = 0xAAAA5555u;
  for (int k = 0; k < 4; ++k) b.push_back(uint8_t(qh >> (8 * k)));
  for (int j = 0; j < 16; ++j) b.push_back(uint8_t(j | ((15 - j) << 4)));
  std::vector<float> y(32);
  dequantize_ggml(*ggml_type_info(6), b, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], float((j | int((qh >> j) & 1) << 4) - 16) * 0.5f) << j;
    EXPECT_EQ(y[size_t(j + 16)], float(((15 - j) | int((qh >> (j + 16)) & 1) << 4) - 16) * 0.5f) << j;
  }
}

TEST(GgmlTypes, Q4_KSubBlockScalesAndMins) {
  // d = 1, dmin = 0.5; sub-block j has scale j + 1 and min 2 j (6-bit packing:
  // j < 4 in the low six bits of bytes j and j + 4, j >= 4 split over byte j + 4
  // and the top two bits of bytes j - 4 and j); every q = 3.
  std::vector<uint8_t> b;
  put16(b, float_to_fp16(1.0f));
  put16(b, float_to_fp16(0.5f));
  uint8_t s[12] = {};
  for (int j = 0; j < 8; ++j) {
    const int sc = j + 1, mn = 2 * j;
    if (j < 4) {
      s[j] = uint8_t(s[j] | sc);
      s[j + 4] = uint8_t(s[j + 4] | mn);
    } else {
      s[j + 4] = uint8_t((sc & 15) | (mn & 15) << 4);
      s[j - 4] = uint8_t(s[j - 4] | (sc >> 4) << 6);
      s[j] = uint8_t(s[j] | (mn >> 4) << 6);
    }
  }
  b.insert(b.end(), s, s + 12);
  b.insert(b.end(), 128, uint8_t(0x33));
  std::vector<float> y(256);
  dequantize_ggml(*ggml_type_info(12), b, y);
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(y[size_t(i)], float(i / 32 + 1) * 3.0f - 0.5f * float(2 * (i / 32))) << i;
}

TEST(GgmlTypes, Q6_KSignedScalesAndOffset) {
  // ql = 0, qh = 0 (q = -32 everywhere), scales[i] = i - 8, d = 0.25.
  std::vector<uint8_t> b(192, 0);
  for (int i = 0; i < 16; ++i) b.push_back(uint8_t(int8_t(i - 8)));
  put16(b, float_to_fp16(0.25f));
  std::vector<float> y(256);
  dequantize_ggml(*ggml_type_info(14), b, y);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[size_t(i)], 0.25f * float(i / 16 - 8) * -32.0f) << i;
}
