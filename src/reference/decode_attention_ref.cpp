// CPU reference of the decode-step KV-cache kernels (see decode_attention_ref.h).
#include "reference/decode_attention_ref.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/layout/kv_cache.cuh"
#include "quant/hadamard.h"
#include "quant/kv_int4.h"

namespace futr::ref {

KvLayerHost::KvLayerHost(int n, int h, int d) : num_slots(n), kv_heads(h), head_dim(d) {
  FUTR_CHECK(n % layout::kKvSlotAlign == 0, "KvLayerHost: num_slots {} must be a multiple of {}", n,
             layout::kKvSlotAlign);
  const size_t e = size_t(n) * size_t(h) * size_t(d);
  k.assign(e, 0);
  v.assign(e, 0);
  k4.assign(layout::kv_nibble_bytes(h, d, n), 0);
  v4.assign(layout::kv_nibble_bytes(h, d, n), 0);
  ks.assign(size_t(n) * size_t(h), 0.0f);
  vs.assign(size_t(n) * size_t(h), 0.0f);
}

namespace {

quant::KvInt4Half half(KvLayerHost& c, bool key) {
  return {key ? c.k4.data() : c.v4.data(),
          key ? c.ks.data() : c.vs.data(),
          key,
          c.num_slots,
          c.kv_heads,
          c.head_dim};
}
quant::KvInt4Half half(const KvLayerHost& c, bool key) { return half(const_cast<KvLayerHost&>(c), key); }

}  // namespace

void kv_append(KvLayerHost& c, const uint16_t* k, const uint16_t* v, int64_t ld, int rows, const int* row_seq,
               const int* row_pos, const int* slot_base, bool mirror, int rot_block) {
  const int D = c.head_dim;
  std::vector<float> x(static_cast<size_t>(D));
  for (int r = 0; r < rows; ++r) {
    const int slot = slot_base[row_seq[r]] + row_pos[r];
    FUTR_ASSERT(slot >= 0 && slot < c.num_slots);
    for (int h = 0; h < c.kv_heads; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        const uint16_t* src = (kv == 0 ? k : v) + r * ld + int64_t(h) * D;
        std::vector<uint16_t>& dst = kv == 0 ? c.k : c.v;
        for (int d = 0; d < D; ++d) {
          dst[layout::kv_primary_index(c.kv_heads, D, slot, h, d)] = src[d];
          x[size_t(d)] = bf16_to_float(src[d]);
        }
        if (!mirror) continue;
        if (rot_block > 0) quant::hadamard_rotate(x.data(), D, rot_block);
        quant::kv_int4_store_row(half(c, kv == 0), slot, h, x.data());
      }
  }
}

void decode_attention(const KvLayerHost& c, const uint16_t* q, int batch, int group, const int* slot_base,
                      const int* kv_len, bool int4, int rot_block, float* out) {
  const int D = c.head_dim, nh = c.kv_heads * group;
  const quant::KvInt4Half kh = half(c, true), vh = half(c, false);
  std::vector<float> qr(static_cast<size_t>(D)), o(static_cast<size_t>(D));
  std::vector<double> s, acc(static_cast<size_t>(D));
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < nh; ++j) {
      const int h = j / group, len = kv_len[b], base = slot_base[b];
      const uint16_t* qp = q + (int64_t(b) * nh + j) * D;
      for (int d = 0; d < D; ++d) qr[size_t(d)] = bf16_to_float(qp[d]);
      if (int4 && rot_block > 0) quant::hadamard_rotate(qr.data(), D, rot_block);
      auto key = [&](int t, int d) {
        return int4 ? double(quant::kv_int4_load(kh, base + t, h, d))
                    : double(bf16_to_float(c.k[layout::kv_primary_index(c.kv_heads, D, base + t, h, d)]));
      };
      auto value = [&](int t, int d) {
        return int4 ? double(quant::kv_int4_load(vh, base + t, h, d))
                    : double(bf16_to_float(c.v[layout::kv_primary_index(c.kv_heads, D, base + t, h, d)]));
      };
      s.assign(size_t(len), 0.0);
      double mx = -INFINITY;
      for (int t = 0; t < len; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(qr[size_t(d)]) * key(t, d);
        s[size_t(t)] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[size_t(t)]);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int t = 0; t < len; ++t) {
        const double p = std::exp(s[size_t(t)] - mx);
        l += p;
        for (int d = 0; d < D; ++d) acc[size_t(d)] += p * value(t, d);
      }
      for (int d = 0; d < D; ++d) o[size_t(d)] = len > 0 ? float(acc[size_t(d)] / l) : 0.0f;
      if (int4 && rot_block > 0) quant::hadamard_rotate(o.data(), D, rot_block);
      std::copy(o.begin(), o.end(), out + (int64_t(b) * nh + j) * D);
    }
}

}  // namespace futr::ref
