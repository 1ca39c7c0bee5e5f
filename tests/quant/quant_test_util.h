// Helpers of the quantization tests: random matrices with realistic structure
// (correlated inputs with outlier channels), EXPECT_FUTR_ERROR (tests/support/expect_error.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/expect_error.h"

namespace futr::test {

// Fresh random inputs every run (the seed is printed on failure by the caller).
inline std::mt19937& test_rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

inline std::vector<float> randn(size_t n, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Calibration-like inputs X [rows, k]: a low-rank correlated part plus noise,
// and a few outlier channels (x10), as LLM activations have.
inline std::vector<float> correlated_inputs(int rows, int k, std::mt19937& rng) {
  const int rank = 8;
  const std::vector<float> basis = randn(size_t(rank) * k, 1.0f, rng);
  std::vector<float> x(size_t(rows) * k);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int r = 0; r < rows; ++r) {
    float c[8];
    for (float& v : c) v = d(rng);
    for (int j = 0; j < k; ++j) {
      float v = 0.3f * d(rng);
      for (int t = 0; t < rank; ++t) v += c[t] * basis[size_t(t) * k + j];
      if (j % 37 == 5) v *= 10.0f;  // outlier channels
      x[size_t(r) * k + j] = v;
    }
  }
  return x;
}

// H = X^T X / rows in double.
inline std::vector<double> hessian_of(const std::vector<float>& x, int rows, int k) {
  std::vector<double> h(size_t(k) * k, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < k; ++i) {
      const double xi = x[size_t(r) * k + i];
      for (int j = 0; j < k; ++j) h[size_t(i) * k + j] += xi * x[size_t(r) * k + j];
    }
  for (double& v : h) v /= rows;
  return h;
}

}  // namespace futr::test
