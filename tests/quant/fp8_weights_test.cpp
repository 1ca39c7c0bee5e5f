// FP8 E4M3 per-channel weights (src/quant/fp8_weights.h): scale rule, round
// trip within E4M3's precision, exact dequantization, gain folding.
#include "quant/fp8_weights.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/numeric.h"
#include "quant/quant_test_util.h"

using namespace futr;
using namespace futr::quant;

TEST(Fp8Weights, PerChannelRoundTrip) {
  auto& rng = test::test_rng();
  const int n = 40, k = 576;
  std::vector<float> w = test::randn(size_t(n) * k, 0.03f, rng);
  for (int c = 0; c < k; ++c) w[size_t(3) * k + c] = 0.0f;  // an all-zero row
  const Fp8Weights q = quantize_fp8(w, n, k, false);
  const std::vector<float> d = dequantize_fp8(q);
  for (int r = 0; r < n; ++r) {
    float amax = 0;
    for (int c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[size_t(r) * k + c]));
    EXPECT_EQ(q.scale[size_t(r)], r == 3 ? 1.0f : amax / 448.0f);
    for (int c = 0; c < k; ++c) {
      const size_t i = size_t(r) * k + c;
      EXPECT_EQ(d[i], e4m3_to_float(q.w[i]) * q.scale[size_t(r)]);
      EXPECT_EQ(d[i], q.dequant(r, c));
      // E4M3: 3 mantissa bits, relative error <= 2^-4 for normals; absolute 2^-10 * s for subnormals.
      EXPECT_LE(std::fabs(d[i] - w[i]),
                std::max(std::fabs(w[i]) / 16.0f, q.scale[size_t(r)] / 1024.0f) * 1.0001f);
    }
  }
}

TEST(Fp8Weights, FoldGain) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<float> g = {0.5f, 2.0f, -1.0f};
  const std::vector<float> f = fold_gain(w, 2, 3, g);
  EXPECT_EQ(f, (std::vector<float>{0.5f, 4, -3, 2, 10, -6}));
  const Fp8Weights q = quantize_fp8(f, 2, 3, true);
  EXPECT_TRUE(q.folded_gain);
  EXPECT_THROW(fold_gain(w, 2, 3, std::vector<float>(2)), Error);
}

TEST(Fp8Weights, Errors) {
  std::vector<float> w(16, 1.0f);
  w[9] = INFINITY;
  EXPECT_FUTR_ERROR(quantize_fp8(w, 2, 8, false, "blk.0.ffn_down"),
                    "blk.0.ffn_down: row 1 holds a non-finite weight");
  EXPECT_FUTR_ERROR(quantize_fp8(w, 3, 8, false, "x"), "x: 16 values for an FP8 weight [3, 8]");
}

// Scales stay in [kFp8MinWeightScale, kFp8MaxWeightScale] (what a .futr may
// hold): a row of tiny values gets the smallest scale (its values within
// half of E4M3's smallest step at that scale, 2^-74), a row beyond the
// largest weight is refused naming the tensor and row.
TEST(Fp8Weights, ScalesStayInTheirBounds) {
  std::vector<float> w(16, 1e-30f);
  w[3] = -3e-30f;
  const Fp8Weights q = quantize_fp8(w, 2, 8, false, "t");
  EXPECT_EQ(q.scale[0], kFp8MinWeightScale);
  EXPECT_EQ(q.scale[1], kFp8MinWeightScale);
  const std::vector<float> d = dequantize_fp8(q);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_LE(std::fabs(d[i] - w[i]), 0x1p-74f) << i;
  std::vector<float> big(16, 1.0f);
  big[12] = 1e9f;
  EXPECT_FUTR_ERROR(quantize_fp8(big, 2, 8, false, "blk.0.ffn_up"),
                    "blk.0.ffn_up: row 1 holds a weight of magnitude");
  big[12] = kFp8MaxWeightScale * 448.0f;  // the largest allowed
  EXPECT_EQ(quantize_fp8(big, 2, 8, false, "t").scale[1], kFp8MaxWeightScale);
}
