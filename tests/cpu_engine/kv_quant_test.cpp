// Quantized KV storages (src/cpu_engine/kv_quant.h): BF16 rows, the INT4 mirror in
// its documented byte layout, the rotated variant (attention scores preserved
// up to INT4 rounding, output un-rotated), and a whole forward pass with each.
#include "cpu_engine/kv_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/numeric.h"
#include "cpu_engine/forward.h"
#include "cpu_engine/quant_model.h"
#include "quant/hadamard.h"
#include "quant/kv_int4.h"
#include "support/compare.h"

using namespace futr;
using namespace futr::cpu;

namespace {

std::vector<float> randn(size_t n, float s, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(KvQuant, Bf16RowsAndQuery) {
  std::mt19937 rng(std::random_device{}());
  const ModelConfig c = test::quant_config();
  QuantKvStorage kv(c, 20, KvFormat::kBf16, 0);
  const int n = 5, kvd = c.kv_dim();
  const auto k = randn(size_t(n) * kvd, 2.0f, rng), v = randn(size_t(n) * kvd, 2.0f, rng);
  kv.write(1, 3, n, k.data(), v.data());
  const KvLayerView view = kv.read(1, 8);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int d = 0; d < c.head_dim; ++d) {
        const size_t src = size_t(i) * kvd + size_t(h) * c.head_dim + size_t(d);
        EXPECT_EQ(view.heads[size_t(h)].k[(3 + i) * view.heads[size_t(h)].ld + d], round_bf16(k[src]));
        EXPECT_EQ(view.heads[size_t(h)].v[(3 + i) * view.heads[size_t(h)].ld + d], round_bf16(v[src]));
      }
  std::vector<float> q = randn(size_t(2) * c.q_dim(), 1.0f, rng), q0 = q;
  kv.map_query(q.data(), 2, c.q_dim());
  for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(q[i], round_bf16(q0[i]));
  EXPECT_EQ(kv.bytes(), int64_t(2) * 2 * c.n_layers * c.n_kv_heads * 20 * c.head_dim);
}

TEST(KvQuant, Int4MirrorLayoutAndDequantization) {
  std::mt19937 rng(std::random_device{}());
  const ModelConfig c = test::quant_config();
  for (KvFormat mode : {KvFormat::kInt4, KvFormat::kInt4Rot}) {
    QuantKvStorage kv(c, 19, mode, 16);
    EXPECT_EQ(kv.slots(), 32);  // capacity rounded up to whole 16-slot steps (layout::kKvSlotAlign)
    const int n = 7, kvd = c.kv_dim(), D = c.head_dim;
    const auto k = randn(size_t(n) * kvd, 2.0f, rng), v = randn(size_t(n) * kvd, 2.0f, rng);
    kv.write(0, 10, n, k.data(), v.data());
    const KvLayerView view = kv.read(0, 17);
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<float> kr(static_cast<size_t>(D)), vr(static_cast<size_t>(D));
        for (int d = 0; d < D; ++d) {
          kr[size_t(d)] = round_bf16(k[size_t(i) * kvd + size_t(h) * D + size_t(d)]);
          vr[size_t(d)] = round_bf16(v[size_t(i) * kvd + size_t(h) * D + size_t(d)]);
        }
        if (mode == KvFormat::kInt4Rot) {
          quant::hadamard_rotate(kr.data(), D, 16);
          quant::hadamard_rotate(vr.data(), D, 16);
        }
        int8_t qk[64], qv[64];
        const float sk = quant::kv_int4_quantize_row(kr.data(), D, qk);
        const float sv = quant::kv_int4_quantize_row(vr.data(), D, qv);
        const int slot = 10 + i;
        EXPECT_EQ(kv.key_scales(0)[layout::kv_scale_index(kv.slots(), slot, h)], sk);
        EXPECT_EQ(kv.value_scales(0)[layout::kv_scale_index(kv.slots(), slot, h)], sv);
        for (int d = 0; d < D; ++d) {
          const auto pk = layout::kv_key_nibble(c.n_kv_heads, D, slot, h, d);
          const auto pv = layout::kv_value_nibble(c.n_kv_heads, D, slot, h, d);
          EXPECT_EQ((kv.key_nibbles(0)[pk.byte] >> pk.shift) & 0xf, qk[d] + 8);
          EXPECT_EQ((kv.value_nibbles(0)[pv.byte] >> pv.shift) & 0xf, qv[d] + 8);
          const int64_t ld = view.heads[size_t(h)].ld;
          EXPECT_EQ(view.heads[size_t(h)].k[slot * ld + d], float(qk[d]) * sk);
          EXPECT_EQ(view.heads[size_t(h)].v[slot * ld + d], float(qv[d]) * sv);
        }
      }
    // Mirror bytes = 2 * slots * kv_heads * D/2 + FP32 scales (slots: 19 rounded up to 32), plus the BF16
    // primary.
    const int64_t primary = int64_t(2) * 2 * c.n_layers * c.n_kv_heads * 19 * D;
    const int64_t mirror = int64_t(c.n_layers) * (2 * 32 * c.n_kv_heads * D / 2 + 2 * 4 * 32 * c.n_kv_heads);
    EXPECT_EQ(kv.bytes(), primary + mirror);
  }
}

TEST(KvQuant, RotationPreservesScoresAndUnrotatesOutput) {
  std::mt19937 rng(std::random_device{}());
  ModelConfig c = test::quant_config();
  QuantKvStorage rot(c, 8, KvFormat::kInt4Rot, 32), plain(c, 8, KvFormat::kBf16, 0);
  const int kvd = c.kv_dim(), D = c.head_dim;
  const auto k = randn(size_t(kvd), 1.0f, rng), v = randn(size_t(kvd), 1.0f, rng);
  rot.write(0, 0, 1, k.data(), v.data());
  plain.write(0, 0, 1, k.data(), v.data());
  std::vector<float> q = randn(size_t(c.q_dim()), 1.0f, rng), qr = q;
  plain.map_query(q.data(), 1, c.q_dim());
  rot.map_query(qr.data(), 1, c.q_dim());
  const KvLayerView a = plain.read(0, 1), b = rot.read(0, 1);
  // Head 0 reads KV head 0: q.k in rotated space ~ q.k, within the INT4 rounding of k.
  double s0 = 0, s1 = 0, qn = 0;
  for (int d = 0; d < D; ++d) {
    s0 += double(q[size_t(d)]) * a.heads[0].k[d];
    s1 += double(qr[size_t(d)]) * b.heads[0].k[d];
    qn += double(q[size_t(d)]) * q[size_t(d)];
  }
  float amax = 0;
  for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(b.heads[0].k[d]));
  EXPECT_NEAR(s1, s0, std::sqrt(qn) * std::sqrt(double(D)) * (amax / 7.0) * 0.5 + 1e-4);
  // unmap_output(o H) = o: the dequantized rotated V, un-rotated, is ~ v.
  std::vector<float> o(size_t(c.q_dim()), 0.0f);
  for (int d = 0; d < D; ++d) o[size_t(d)] = b.heads[0].v[d];
  rot.unmap_output(o.data(), 1, c.q_dim());
  double num = 0, den = 0;
  float vamax = 0;
  for (int d = 0; d < D; ++d) {
    num += std::pow(o[size_t(d)] - round_bf16(v[size_t(d)]), 2);
    den += std::pow(round_bf16(v[size_t(d)]), 2);
    vamax = std::max(vamax, std::fabs(b.heads[0].v[d]));  // = 7 * scale of the rotated row
  }
  // Each rotated element is off by at most half a step (amax/14); the
  // rotation is orthogonal, so ||o - v|| <= sqrt(D) * amax/14 exactly (a
  // typical row is 3.5x below: RMS amax/7/sqrt(12)). 1% + 1e-3 for the FP32
  // butterflies and the BF16 rounding of v.
  EXPECT_LE(std::sqrt(num), std::sqrt(double(D)) * vamax / 14.0 * 1.01 + 1e-3 * std::sqrt(den));
  EXPECT_LT(std::sqrt(num / den), 0.5);  // and far from garbage
}

TEST(KvQuant, ForwardWithEachMode) {
  const ModelConfig c = test::quant_config();
  const Model m = test::random_model(c, 7);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 13 + 5) % c.vocab);
  Forward ref(m, 64);
  const Tensor base = ref.eval_all(tokens);
  for (KvFormat mode : {KvFormat::kBf16, KvFormat::kInt4, KvFormat::kInt4Rot}) {
    Forward f(m, make_weights(m), make_kv_storage(c, 64, mode, 32));
    const Tensor prefill = f.eval_all(tokens);
    const double err = test::compare(prefill.data, base.data).rel_l2;
    EXPECT_LT(err, mode == KvFormat::kBf16 ? 2e-2 : 0.5) << to_string(mode);
    // Token-by-token decode reads the same cache rows: same logits (up to BLAS order).
    Forward g(m, make_weights(m), make_kv_storage(c, 64, mode, 32));
    std::vector<float> dec;
    for (int32_t t : tokens) {
      const Tensor l = g.eval_last(std::span<const int32_t>(&t, 1));
      dec.insert(dec.end(), l.data.begin(), l.data.end());
    }
    EXPECT_LT(test::compare(dec, prefill.data).rel_l2, 1e-4) << to_string(mode);
  }
  EXPECT_THROW(make_kv_storage(c, 64, KvFormat::kInt4Rot, 48), Error);
  EXPECT_THROW(parse_kv_format("int8"), Error);
}
