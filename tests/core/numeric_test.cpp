// Number formats (core/numeric.h): exhaustive decode/encode round trips and
// rounding cases that the GPU conversions must agree with.
#include "core/numeric.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

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

// The bit-level conversions against their definitions through the C library
// (frexp, ldexp, nearbyint in the default rounding mode), on every float of
// a stride through all 2^32 bit patterns plus every pattern near the format
// boundaries (all 2^32 were compared once when the bit forms replaced them).
namespace ref {
uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < std::ldexp(1.0f, -6)) return sign | uint8_t(int(std::nearbyint(a * 512.0f)));
  int e;
  const float m = std::frexp(a, &e);
  int q = int(std::nearbyint(m * 16.0f)), exp = e - 1 + 7;
  if (q == 16) q = 8, ++exp;
  if (exp > 15 || (exp == 15 && q - 8 > 6)) return sign | 0x7e;
  return sign | uint8_t(exp << 3) | uint8_t(q - 8);
}
uint16_t float_to_fp16(float f) {  // below 2^-14: nearbyint of the value in units of 2^-24
  const uint32_t a = std::bit_cast<uint32_t>(f) & 0x7fffffffu;
  if (a >= 0x38800000u) return futr::float_to_fp16(f);  // the normal path did not change
  const uint16_t sign = uint16_t((std::bit_cast<uint32_t>(f) >> 16) & 0x8000u);
  return uint16_t(sign | uint16_t(std::nearbyint(std::bit_cast<float>(a) * 16777216.0f)));
}
}  // namespace ref

TEST(Numeric, BitConversionsEqualTheLibraryDefinitions) {
  auto check = [](uint32_t bits) {
    const float f = std::bit_cast<float>(bits);
    const float r = std::nearbyint(f), h = round_half_even(f);
    if (!std::isnan(f)) ASSERT_EQ(std::bit_cast<uint32_t>(h), std::bit_cast<uint32_t>(r)) << std::hex << bits;
    ASSERT_EQ(float_to_e4m3(f), ref::float_to_e4m3(f)) << std::hex << bits;
    ASSERT_EQ(float_to_fp16(f), ref::float_to_fp16(f)) << std::hex << bits;
  };
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 251) check(uint32_t(b));
  // Around 0, 2^-10 (half the smallest E4M3 subnormal), 2^-6 (the smallest
  // normal), 448 / 464 (saturation), 0.5 and 2^22..2^24 (round_half_even's
  // switch), 2^-14 and 2^-25 (FP16's subnormals), both signs.
  for (float edge :
       {0.0f, 0x1p-10f, 0x1p-6f, 448.0f, 464.0f, 0.5f, 1.5f, 0x1p22f, 0x1p23f, 0x1p24f, 0x1p-14f, 0x1p-25f})
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t u = std::bit_cast<uint32_t>(edge) | sign;
      for (uint32_t d = 0; d < 4096; ++d) check(u + d), check(u - d);
    }
}
