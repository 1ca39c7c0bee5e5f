// Host-side number formats: BF16, FP16 and FP8 E4M3 <-> FP32.
//
// These are the CPU reference's definitions of the formats; the GPU kernels'
// conversions (cvt.rn.bf16.f32, cvt.rn.satfinite.e4m3x2.f32, ...) must agree
// bit for bit, which tests/core/numeric_test.cpp checks against known values.
//   bf16: 1-8-7, round to nearest even, NaN kept quiet.
//   fp16: 1-5-10, round to nearest even, subnormals kept, overflow to inf.
//   e4m3 (OCP "E4M3FN"): 1-4-3, bias 7, max 448, no inf, NaN = 0x7f/0xff;
//         round to nearest even, saturating to +-448 (the "satfinite" mode).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace futr {

// std::nearbyint in the default rounding mode (to nearest, ties to even) for
// every float, without the library call the hot conversion loops paid per
// element: below 2^23 adding and removing 2^23 rounds in the FPU (the float
// spacing there is 1); larger magnitudes, inf and NaN are integral already.
// Needs the compiler to keep (a + c) - c, as it does without -ffast-math.
inline float round_half_even(float x) {
  const float a = std::fabs(x);
  if (!(a < 0x1p23f)) return x;
  return std::copysign((a + 0x1p23f) - 0x1p23f, x);
}

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                         // RNE
  return uint16_t(u >> 16);
}

// Round a float to the nearest bf16 value and return it as float.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(float(man), -24);  // zero or subnormal
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    // value / 2^-24, rounded to nearest even by the FPU (exact: a power-of-two scale).
    const float v = std::bit_cast<float>(a) * 16777216.0f;
    return uint16_t(sign | uint16_t(round_half_even(v)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // RNE on the 13 dropped bits
  return uint16_t(sign | uint16_t(((r >> 13) - (112u << 10)) & 0x7fffu));
}

inline constexpr float kE4M3Max = 448.0f;

inline float e4m3_to_float(uint8_t b) {
  const bool neg = b & 0x80;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  float v;
  if (exp == 0xf && man == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    v = std::ldexp(float(8 + man), exp - 10);  // (1 + man/8) * 2^(exp-7)
  }
  return neg ? -v : v;
}

// Round to nearest even, saturate to +-448; NaN -> 0x7f. On the float's bits
// (equal to the frexp / nearbyint definition for all 2^32 inputs: the test).
inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;          // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;  // >= 448, and inf: satfinite
  if (a < 0x3c800000u)                       // below 2^-6: subnormal steps of 2^-9
    return sign | uint8_t(round_half_even(std::bit_cast<float>(a) * 512.0f));  // 8: the smallest normal
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);  // RNE on the 20 dropped mantissa bits
  const uint32_t v = (r >> 20) - (120u << 3);          // exponent rebiased from 127 to 7
  return sign | uint8_t(v > 0x7eu ? 0x7eu : v);        // a carry into 464: saturated
}

inline float round_e4m3(float f) { return e4m3_to_float(float_to_e4m3(f)); }

}  // namespace futr
