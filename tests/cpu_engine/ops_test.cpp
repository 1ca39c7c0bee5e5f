// The CPU backend's building blocks (cpu_engine/ops.h, cpu_engine/linear.h) against naive
// double-precision transcriptions of their formulas, on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "cpu_engine/kv_cache.h"
#include "cpu_engine/linear.h"
#include "cpu_engine/ops.h"
#include "support/compare.h"
#include "tiny_model.h"

namespace futr::cpu {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float s = 1.0f) {
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

TEST(CpuOps, RmsNormMatchesFormula) {
  std::mt19937 rng(std::random_device{}());
  const int n = 5, d = 576;
  auto x = randn(size_t(n * d), rng, 3.0f);
  auto g = randn(size_t(d), rng);
  std::vector<float> y(x.size());
  rmsnorm(x.data(), g.data(), y.data(), n, d, 1e-5f);
  std::vector<double> ref(x.size());
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += double(x[size_t(i * d + j)]) * x[size_t(i * d + j)];
    const double r = 1.0 / std::sqrt(ss / d + 1e-5);
    for (int j = 0; j < d; ++j) ref[size_t(i * d + j)] = x[size_t(i * d + j)] * r * g[size_t(j)];
  }
  EXPECT_LT(test::compare(y, to_float(ref)).rel_l2, 1e-6);
  // In place.
  rmsnorm(x.data(), g.data(), x.data(), n, d, 1e-5f);
  EXPECT_EQ(x, y);
}

TEST(CpuOps, RopeInvFreqPlain) {
  const auto f = rope_inv_freq(64, 100000.0f, RopeScaling{});
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_DOUBLE_EQ(f[size_t(i)], std::pow(100000.0, -2.0 * i / 64));
}

TEST(CpuOps, RopeInvFreqLlama3) {
  // Llama-3.1's parameters: theta 500000, factor 8, low 1, high 4, L0 8192, D 128.
  RopeScaling s;
  s.type = "llama3";
  s.factor = 8.0f;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_max_position = 8192;
  const auto f = rope_inv_freq(128, 500000.0f, s);
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  c.rope_scaling = s;
  const auto ref = test::naive_inv_freq(c);
  int high = 0, low = 0, mid = 0;
  for (int i = 0; i < 64; ++i) {
    const double plain = std::pow(500000.0, -2.0 * i / 128);
    const double wl = 2 * std::numbers::pi / plain;
    EXPECT_NEAR(f[size_t(i)], ref[size_t(i)], 1e-12 * plain) << i;
    if (wl < 8192.0 / 4) {
      EXPECT_DOUBLE_EQ(f[size_t(i)], plain) << i;  // high frequency: unchanged
      ++high;
    } else if (wl > 8192.0) {
      EXPECT_NEAR(f[size_t(i)], plain / 8, 1e-15) << i;  // low frequency: / factor
      ++low;
    } else {
      EXPECT_LT(f[size_t(i)], plain);  // blended, strictly between
      EXPECT_GT(f[size_t(i)], plain / 8);
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
}

TEST(CpuOps, RopeMatchesFormulaAndKeepsRelativePosition) {
  std::mt19937 rng(std::random_device{}());
  const int D = 64, heads = 3, n = 7, pos0 = 5;
  const int64_t ld = heads * D + 8;  // padded rows
  RopeScaling s;
  s.type = "llama3";
  s.factor = 8.0f;
  s.original_max_position = 16;
  const RopeTable table = make_rope_table(D, 10000.0f, s, 64);
  auto x = randn(size_t(n * ld), rng);
  const auto x0 = x;
  apply_rope(x.data(), n, heads, ld, pos0, table);
  ModelConfig c;
  c.head_dim = D;
  c.rope_theta = 10000.0f;
  c.rope_scaling = s;
  const auto f = test::naive_inv_freq(c);
  std::vector<double> ref(x0.begin(), x0.end());
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < heads; ++h) test::naive_rope(&ref[size_t(i * ld + h * D)], D, pos0 + i, f);
  EXPECT_LT(test::compare(x, to_float(ref)).rel_l2, 1e-6);
  for (int i = 0; i < n; ++i)  // padding untouched
    for (int64_t j = heads * D; j < ld; ++j) EXPECT_EQ(x[size_t(i * ld + j)], x0[size_t(i * ld + j)]);

  // q(p1) . k(p2) depends only on p1 - p2.
  auto q = randn(size_t(D), rng), k = randn(size_t(D), rng);
  auto dot_at = [&](int p1, int p2) {
    auto a = q, b = k;
    apply_rope(a.data(), 1, 1, D, p1, table);
    apply_rope(b.data(), 1, 1, D, p2, table);
    double d = 0;
    for (int i = 0; i < D; ++i) d += double(a[size_t(i)]) * b[size_t(i)];
    return d;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(40, 33), 1e-4);
  EXPECT_THROW(apply_rope(x.data(), 1, 1, D, 64, table), Error);
}

// Naive causal GQA attention in double: q [n, Nh*D], keys/values [L, Nkv*D].
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int n, int pos0, int Nh, int Nkv, int D) {
  std::vector<double> out(size_t(n * Nh * D), 0.0);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < Nh; ++h) {
      const int g = h / (Nh / Nkv), p = pos0 + i;
      std::vector<double> s(size_t(p + 1));
      double mx = -1e300, sum = 0;
      for (int t = 0; t <= p; ++t) {
        double d = 0;
        for (int j = 0; j < D; ++j)
          d += double(q[size_t(i * Nh * D + h * D + j)]) * k[size_t(t * Nkv * D + g * D + j)];
        s[size_t(t)] = d / std::sqrt(double(D));
        mx = std::max(mx, s[size_t(t)]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int t = 0; t <= p; ++t)
        for (int j = 0; j < D; ++j)
          out[size_t(i * Nh * D + h * D + j)] += s[size_t(t)] / sum * v[size_t(t * Nkv * D + g * D + j)];
    }
  return out;
}

void check_attention(int Nh, int Nkv, int D, int pos0, int n) {
  std::mt19937 rng(std::random_device{}());
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = Nh;
  c.n_kv_heads = Nkv;
  c.head_dim = D;
  const int L = pos0 + n;
  auto k = randn(size_t(L * Nkv * D), rng), v = randn(size_t(L * Nkv * D), rng);
  auto q = randn(size_t(n * Nh * D), rng, 0.5f);
  Fp32KvStorage kv(c, L + 3);
  kv.write(1, 0, pos0, k.data(), v.data());  // earlier positions, then the new rows
  kv.write(1, pos0, n, k.data() + size_t(pos0 * Nkv * D), v.data() + size_t(pos0 * Nkv * D));
  std::vector<float> out(size_t(n * Nh * D), NAN);
  AttentionScratch scratch;
  causal_attention(q.data(), Nh * D, n, pos0, Nh, D, kv.read(1, L), out.data(), Nh * D, scratch);
  const auto ref = naive_attention(q, k, v, n, pos0, Nh, Nkv, D);
  const auto e = test::compare(out, to_float(ref));
  EXPECT_EQ(e.non_finite, 0u);
  EXPECT_LT(e.rel_l2, 1e-5) << "Nh " << Nh << " Nkv " << Nkv << " D " << D << " pos0 " << pos0 << " n " << n;
}

TEST(CpuOps, AttentionGqaRatios) {
  check_attention(9, 3, 64, 0, 1);     // SmolLM2 heads, first token
  check_attention(9, 3, 64, 0, 37);    // prefill
  check_attention(9, 3, 64, 20, 1);    // decode
  check_attention(4, 4, 32, 3, 5);     // MHA
  check_attention(3, 1, 128, 11, 6);   // MQA, head_dim 128
  check_attention(8, 2, 16, 50, 300);  // several 128-row blocks after a cached prefix
}

TEST(CpuOps, SwigluMatchesFormula) {
  std::mt19937 rng(std::random_device{}());
  auto g = randn(1000, rng, 4.0f), u = randn(1000, rng);
  g[0] = -100.0f;  // exp overflow path: silu -> -0
  g[1] = 100.0f;
  std::vector<float> out(1000);
  swiglu(g.data(), u.data(), out.data(), 1000);
  std::vector<double> ref(1000);
  for (size_t i = 0; i < 1000; ++i) ref[i] = double(g[i]) / (1 + std::exp(-double(g[i]))) * u[i];
  EXPECT_LT(test::compare(out, to_float(ref)).rel_l2, 1e-6);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(CpuOps, DenseLinearMatchesTripleLoop) {
  std::mt19937 rng(std::random_device{}());
  const int N = 37, K = 53;
  Tensor w({N, K});
  w.data = randn(size_t(N * K), rng);
  auto lin = DenseLinear::borrow(w, "w");
  EXPECT_EQ(lin->in_features(), K);
  EXPECT_EQ(lin->out_features(), N);
  for (int m : {1, 2, 7}) {
    auto x = randn(size_t(m * K), rng);
    std::vector<float> y(size_t(m * N), NAN);
    lin->forward(x.data(), m, y.data());
    std::vector<double> ref(size_t(m * N), 0.0);
    for (int i = 0; i < m; ++i)
      for (int o = 0; o < N; ++o)
        for (int kk = 0; kk < K; ++kk)
          ref[size_t(i * N + o)] += double(x[size_t(i * K + kk)]) * w.data[size_t(o * K + kk)];
    EXPECT_LT(test::compare(y, to_float(ref)).rel_l2, 1e-6) << "m " << m;
  }
  EXPECT_THROW(DenseLinear::own(Tensor({3}), "bad"), Error);
}

TEST(CpuOps, EmbedRejectsBadIds) {
  std::vector<float> table = {1, 2, 3, 4, 5, 6};  // vocab 3, hidden 2
  std::vector<float> x(4);
  std::vector<int32_t> ok = {2, 0};
  embed(table.data(), 3, 2, ok, x.data());
  EXPECT_EQ(x, (std::vector<float>{5, 6, 1, 2}));
  std::vector<int32_t> bad = {1, 3};
  EXPECT_THROW(embed(table.data(), 3, 2, bad, x.data()), Error);
  std::vector<int32_t> neg = {-1};
  EXPECT_THROW(embed(table.data(), 3, 2, neg, x.data()), Error);
}

}  // namespace
}  // namespace futr::cpu
