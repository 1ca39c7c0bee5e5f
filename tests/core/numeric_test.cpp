// Number formats (core/numeric.h): exhaustive decode/encode round trips and
// rounding cases that the GPU conversions must agree with.
#include "core/numeric.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace futr;

TEST(Numeric, Bf16RoundTripAllCodes) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float f = bf16_to_float(uint16_t(c));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), c) << c;
  }
}

TEST(Numeric, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Numeric, Fp16RoundTripAllCodes) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float f = fp16_to_float(uint16_t(c));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp16(f), c) << c;
  }
}

TEST(Numeric, Fp16Rounding) {
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half of min subnormal: ties to 0
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 * min: ties to even (2)
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
}

TEST(Numeric, E4M3RoundTripAllCodes) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float f = e4m3_to_float(uint8_t(c));
    if (std::isnan(f)) continue;
    if (c == 0x80) {  // -0
      EXPECT_EQ(float_to_e4m3(f), 0x80);
      continue;
    }
    EXPECT_EQ(float_to_e4m3(f), c) << c << " " << f;
  }
}

TEST(Numeric, E4M3KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(float_to_e4m3(NAN), 0x7f);
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);                // halfway 1 and 1.125: even (1)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);                // halfway 1.125 and 1.25: even (1.25)
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);                 // above 448 saturates, never NaN
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the min subnormal: even (0)
}

TEST(Numeric, E4M3IsNearest) {
  // For many values, the chosen code is at least as close as its neighbours.
  for (int i = -20000; i <= 20000; ++i) {
    const float x = float(i) * 0.0223f;
    const uint8_t c = float_to_e4m3(x);
    const float q = e4m3_to_float(c);
    if (std::fabs(x) >= 448.0f) continue;
    for (int d : {-1, 1}) {
      const int n = int(c & 0x7f) + d;
      if (n < 0 || n > 0x7e) continue;
      const float qn = e4m3_to_float(uint8_t((c & 0x80) | n));
      EXPECT_LE(std::fabs(q - x), std::fabs(qn - x) + 1e-7f) << x;
    }
  }
}
