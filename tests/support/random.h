// Fresh random inputs for the GPU tests (every run draws new data: a kernel
// must compute the same function on any valid input): one generator per test
// binary seeded from std::random_device, and BF16 draws from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "core/numeric.h"

namespace futr::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

// n BF16 values (bits) ~ N(0, sd).
inline std::vector<uint16_t> randn_bf16(size_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<uint16_t> x(n);
  for (auto& v : x) v = float_to_bf16(d(rng()));
  return x;
}

}  // namespace futr::test
