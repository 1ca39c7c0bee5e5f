// INT4 group scales, RTN and the clipping search (src/quant/int4_quant.h):
// the group rule, the bounds of RTN, exact dequantization, round trips
// through the fragment-order packing, the clipping search never worse than
// RTN on its objective, and the error cases.
#include "quant/int4_quant.h"

#include <gtest/gtest.h>

#include "core/numeric.h"
#include "quant/int4_pack.h"
#include "quant/quant_test_util.h"

using namespace futr;
using namespace futr::quant;

TEST(Int4Quant, GroupRule) {
  EXPECT_EQ(int4_group_for(4096, "w"), 128);
  EXPECT_EQ(int4_group_for(1536, "w"), 128);
  EXPECT_EQ(int4_group_for(576, "w"), 64);  // SmolLM2 hidden = 4.5 x 128
  EXPECT_FUTR_ERROR(int4_group_for(100, "blk.0.attn_q"), "blk.0.attn_q: INT4 needs K to be a multiple of 64");
}

TEST(Int4Quant, RtnBoundsAndExactDequant) {
  auto& rng = test::test_rng();
  const int n = 24, k = 576;
  const std::vector<float> w = test::randn(size_t(n) * k, 0.02f, rng);
  const Int4Weights q = quantize_int4(w, n, k, 0, {});
  ASSERT_EQ(q.group, 64);
  ASSERT_EQ(q.scale.size(), size_t(n) * (k / 64));
  const std::vector<float> d = dequantize_int4(q);
  for (int r = 0; r < n; ++r)
    for (int g = 0; g < k / 64; ++g) {
      float amax = 0;
      for (int t = 0; t < 64; ++t) amax = std::max(amax, std::fabs(w[size_t(r) * k + g * 64 + t]));
      const float s = fp16_to_float(q.scale[size_t(r) * (k / 64) + g]);
      EXPECT_EQ(q.scale[size_t(r) * (k / 64) + g], float_to_fp16(2.0f * amax / 15.0f));
      for (int t = 0; t < 64; ++t) {
        const size_t i = size_t(r) * k + g * 64 + t;
        EXPECT_GE(q.q[i], -8);
        EXPECT_LE(q.q[i], 7);
        // s/2, plus the FP16 rounding of the scale at the clamped extreme (7.5 s16 may
        // exceed 7.5 by 7.5 * 2^-11 relative): 0.5 s + 7.5 s 2^-11 <= 0.504 s.
        EXPECT_LE(std::fabs(w[i] - d[i]), 0.504f * s) << r << " " << g << " " << t;
        EXPECT_EQ(d[i], float(q.q[i]) * s);  // exact product
        EXPECT_EQ(d[i], q.dequant(r, g * 64 + t));
      }
    }
}

TEST(Int4Quant, PackRoundTrip) {
  auto& rng = test::test_rng();
  for (auto [n, k] : {std::pair{64, 576}, {192, 576}, {576, 1536}, {16, 128}}) {
    const std::vector<float> w = test::randn(size_t(n) * k, 1.0f, rng);
    const Int4Weights q = quantize_int4(w, n, k, 0, {});
    const Int4Weights back = unpack_int4(pack_int4(q));
    EXPECT_EQ(back.q, q.q);
    EXPECT_EQ(back.scale, q.scale);
    EXPECT_EQ(back.group, q.group);
  }
}

TEST(Int4Quant, ClipSearchNeverWorseThanRtn) {
  auto& rng = test::test_rng();
  const int n = 32, k = 256;
  std::vector<float> w = test::randn(size_t(n) * k, 1.0f, rng);
  for (size_t i = 0; i < w.size(); i += 97) w[i] *= 6.0f;  // outliers: where clipping pays
  ClipSearch clip;
  clip.enabled = true;
  const Int4Weights rtn = quantize_int4(w, n, k, 128, {});
  const Int4Weights cl = quantize_int4(w, n, k, 128, clip);
  // Per group, on the search's own objective.
  for (int r = 0; r < n; ++r)
    for (int g = 0; g < 2; ++g) {
      auto err = [&](const Int4Weights& q) {
        double e = 0;
        for (int t = 0; t < 128; ++t) {
          const size_t i = size_t(r) * k + g * 128 + t;
          const double d = w[i] - q.dequant(r, g * 128 + t);
          e += d * d;
        }
        return e;
      };
      EXPECT_LE(err(cl), err(rtn) * (1 + 1e-9));
    }
  EXPECT_LT(int4_squared_error(w, cl), 0.95 * int4_squared_error(w, rtn));
  // Weighted objective (diag of H): weights the inputs.
  std::vector<float> diag(size_t(k), 1.0f);
  for (int j = 0; j < k; j += 5) diag[size_t(j)] = 50.0f;
  const Int4Weights cw = quantize_int4(w, n, k, 128, clip, diag);
  EXPECT_LE(int4_squared_error(w, cw, diag), int4_squared_error(w, rtn, diag) * (1 + 1e-9));
}

TEST(Int4Quant, ZeroAndTinyGroups) {
  std::vector<float> w(size_t(8) * 128, 0.0f);
  w[5] = 1e-9f;  // scale underflows FP16: stored as 0, q = 0
  const Int4Weights q = quantize_int4(w, 8, 128, 128, {});
  for (auto s : q.scale) EXPECT_EQ(fp16_to_float(s), 0.0f);
  for (auto v : q.q) EXPECT_EQ(v, 0);
}

TEST(Int4Quant, Errors) {
  std::vector<float> w(size_t(8) * 128, 1.0f);
  EXPECT_FUTR_ERROR(quantize_int4(w, 8, 100, 0, {}, {}, "blk.1.ffn_up"), "blk.1.ffn_up: INT4 needs K");
  EXPECT_FUTR_ERROR(quantize_int4(w, 8, 128, 96, {}, {}, "x"),
                    "x: cannot quantize [8, 128] to INT4 with group 96");
  w[3] = NAN;
  EXPECT_FUTR_ERROR(quantize_int4(w, 8, 128, 0, {}), "not finite");
  std::vector<float> big(size_t(8) * 128, 1e6f);
  EXPECT_FUTR_ERROR(quantize_int4(big, 8, 128, 0, {}), "overflows FP16");
}
