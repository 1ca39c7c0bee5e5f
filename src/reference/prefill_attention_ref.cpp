// CPU reference of the prefill attention (see prefill_attention_ref.h).
#include "reference/prefill_attention_ref.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/layout/kv_cache.cuh"

namespace futr::ref {

void prefill_attention(const KvLayerHost& c, const uint16_t* q, int64_t q_ld, int group,
                       const std::vector<PrefillRequestHost>& reqs, float* out, int64_t out_ld) {
  const int D = c.head_dim, nh = c.kv_heads * group;
  std::vector<double> s, acc(static_cast<size_t>(D));
  for (const PrefillRequestHost& r : reqs) {
    FUTR_CHECK(r.slot_base + r.pos0 + r.n_rows <= c.num_slots, "prefill reference: request past the cache");
    for (int i = 0; i < r.n_rows; ++i)
      for (int j = 0; j < nh; ++j) {
        const int h = j / group, len = r.pos0 + i + 1;
        const uint16_t* qp = q + int64_t(r.row_begin + i) * q_ld + int64_t(j) * D;
        s.assign(size_t(len), 0.0);
        double mx = -INFINITY;
        for (int t = 0; t < len; ++t) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += double(bf16_to_float(qp[d])) *
                   double(bf16_to_float(c.k[layout::kv_primary_index(c.kv_heads, D, r.slot_base + t, h, d)]));
          s[size_t(t)] = dot / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(t)]);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < len; ++t) {
          const double p = std::exp(s[size_t(t)] - mx);
          l += p;
          for (int d = 0; d < D; ++d)
            acc[size_t(d)] +=
                p *
                double(bf16_to_float(c.v[layout::kv_primary_index(c.kv_heads, D, r.slot_base + t, h, d)]));
        }
        float* op = out + int64_t(r.row_begin + i) * out_ld + int64_t(j) * D;
        for (int d = 0; d < D; ++d) op[d] = float(acc[size_t(d)] / l);
      }
  }
}

}  // namespace futr::ref
