// The quantized reference's Linear layers (src/cpu_engine/quant_linear.h) against
// their formulas computed independently in double precision, and the INT4
// layer's one-sgemm evaluation against the literal per-group formula.
#include "cpu_engine/quant_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/numeric.h"
#include "cpu_engine/linear.h"
#include "quant/int4_quant.h"
#include "support/compare.h"

using namespace futr;
using namespace futr::cpu;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

std::vector<float> randn(size_t n, float s) {
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

}  // namespace

// One FP32 sgemm on W~ = q * s instead of per-group partial sums: every product
// is exact in FP32 (bf16 x (int4 x fp16) = 8 + 15 significant bits), so the
// two differ only in the order of FP32 additions.
TEST(QuantLinear, Int4SgemmEqualsGroupedSumsToFp32Rounding) {
  for (auto [m, n, k] : {std::tuple{1, 64, 576}, {7, 192, 576}, {33, 576, 1536}}) {
    const std::vector<float> w = randn(size_t(n) * k, 0.05f), x = randn(size_t(m) * k, 1.0f);
    quant::Int4Weights q = quant::quantize_int4(w, n, k, 0, {});
    Int4Linear lin(q, "w");
    std::vector<float> grouped(size_t(m) * n), xb(x.size()), sg(size_t(m) * n), y(size_t(m) * n);
    lin.forward_grouped(x.data(), m, grouped.data());
    round_bf16_into(x.data(), int64_t(x.size()), xb.data());
    const std::vector<float> deq = quant::dequantize_int4(q);
    gemm_xwt(xb.data(), m, deq.data(), n, k, sg.data());
    // Double-precision reference of the same formula.
    std::vector<float> ref(size_t(m) * n);
    for (int i = 0; i < m; ++i)
      for (int o = 0; o < n; ++o) {
        double acc = 0;
        for (int j = 0; j < k; ++j) acc += double(xb[size_t(i) * k + j]) * q.dequant(o, j);
        ref[size_t(i) * n + o] = float(acc);
      }
    const double d_sg = test::compare(sg, grouped).rel_l2;
    EXPECT_LT(d_sg, 2e-6) << m << " " << n << " " << k;  // observed ~2e-7
    EXPECT_LT(test::compare(sg, ref).rel_l2, 2e-6);
    EXPECT_LT(test::compare(grouped, ref).rel_l2, 2e-6);
    // forward() = BF16 rounding of the sgemm result.
    lin.forward(x.data(), m, y.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], round_bf16(sg[i]));
  }
}

TEST(QuantLinear, Bf16) {
  const int m = 5, n = 24, k = 64;
  const std::vector<float> w = randn(size_t(n) * k, 0.1f), x = randn(size_t(m) * k, 1.0f);
  for (bool round : {true, false}) {
    Bf16Linear lin(w.data(), n, k, round, "w");
    std::vector<float> y(size_t(m) * n);
    lin.forward(x.data(), m, y.data());
    for (int i = 0; i < m; ++i)
      for (int o = 0; o < n; ++o) {
        double acc = 0;
        for (int j = 0; j < k; ++j)
          acc += double(round_bf16(x[size_t(i) * k + j])) * round_bf16(w[size_t(o) * k + j]);
        const float want = round ? round_bf16(float(acc)) : float(acc);
        EXPECT_NEAR(y[size_t(i) * n + o], want, std::fabs(want) * (round ? 8e-3 : 1e-5) + 1e-6);
      }
  }
}

namespace {

// The FP8 formula of quant_linear.h in double: a = e4m3(bf16(x) * (1/s)),
// y = sum a w8 * (s * b_s[n]) (* r[m]).
std::vector<double> fp8_ref(const quant::Fp8Weights& w, const std::vector<float>& x, int m, float s,
                            bool folded, float eps, bool rms_in_cast = false) {
  const int n = w.n, k = w.k;
  std::vector<double> y(size_t(m) * n);
  for (int i = 0; i < m; ++i) {
    double ss = 0;
    for (int j = 0; j < k; ++j)
      ss += double(round_bf16(x[size_t(i) * k + j])) * round_bf16(x[size_t(i) * k + j]);
    const float rf = 1.0f / std::sqrt(float(ss) / float(k) + eps);
    for (int o = 0; o < n; ++o) {
      double acc = 0;
      for (int j = 0; j < k; ++j) {
        float a = round_bf16(x[size_t(i) * k + j]);
        if (rms_in_cast) a = round_bf16(a * rf);
        acc += double(round_e4m3(a * (1.0f / s))) * e4m3_to_float(w.w[size_t(o) * k + j]);
      }
      y[size_t(i) * n + o] = acc * double(s * w.scale[size_t(o)]) * (folded && !rms_in_cast ? rf : 1.0f);
    }
  }
  return y;
}

}  // namespace

TEST(QuantLinear, Fp8OwnerFollowerAndFolding) {
  const int m = 6, k = 128, n = 40;
  auto bank = std::make_shared<quant::ScaleBank>();
  const int site = bank->add_site("blk.0.attn_in");
  auto s = std::make_shared<Fp8Site>();
  s->bank = bank;
  s->id = site;
  const std::vector<float> w1 = randn(size_t(n) * k, 0.05f), w2 = randn(size_t(n) * k, 0.05f);
  quant::Fp8Weights q1 = quant::quantize_fp8(w1, n, k, true), q2 = quant::quantize_fp8(w2, n, k, true);
  Fp8Linear owner(q1, s, true, 1e-5f, "q"), follower(q2, s, false, 1e-5f, "k");
  EXPECT_TRUE(owner.folds_rmsnorm());
  std::vector<float> x = randn(size_t(m) * k, 3.0f), y1(size_t(m) * n), y2(size_t(m) * n);
  for (int call = 0; call < 3; ++call) {
    const float scale = bank->at(0, site).scale();  // the delayed scale of this call
    owner.forward(x.data(), m, y1.data());
    follower.forward(x.data(), m, y2.data());
    const auto r1 = fp8_ref(q1, x, m, scale, true, 1e-5f), r2 = fp8_ref(q2, x, m, scale, true, 1e-5f);
    for (size_t i = 0; i < y1.size(); ++i) {
      EXPECT_NEAR(y1[i], r1[i], 1e-5 * (std::fabs(r1[i]) + 1e-2));
      EXPECT_NEAR(y2[i], r2[i], 1e-5 * (std::fabs(r2[i]) + 1e-2));
    }
    for (auto& v : x) v *= 1.5f;  // the range grows: the next call's scale follows
  }
  EXPECT_EQ(bank->at(0, site).stats().calls, 3u);            // the follower did not step the state
  EXPECT_GT(bank->at(0, site).stats().saturated_calls, 0u);  // x grew 1.5x per call
  // A follower called without its owner on the same input.
  EXPECT_THROW(follower.forward(x.data(), m, y2.data()), Error);

  // Variant: 1/rms applied before the cast.
  auto bank2 = std::make_shared<quant::ScaleBank>();
  auto s2 = std::make_shared<Fp8Site>();
  s2->bank = bank2;
  s2->id = bank2->add_site("blk.0.ffn_in");
  Fp8Linear cast(q1, s2, true, 1e-5f, "gate", /*rms_in_cast=*/true);
  for (int call = 0; call < 2; ++call) {
    const float scale = bank2->at(0, 0).scale();
    cast.forward(x.data(), m, y1.data());
    const auto r = fp8_ref(q1, x, m, scale, true, 1e-5f, true);
    for (size_t i = 0; i < y1.size(); ++i) EXPECT_NEAR(y1[i], r[i], 1e-5 * (std::fabs(r[i]) + 1e-2));
  }
}
