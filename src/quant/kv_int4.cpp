// INT4 KV mirror: row quantization and layout (see kv_int4.h).
#include "quant/kv_int4.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::quant {

float kv_int4_quantize_row(const float* x, int d, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < d; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  FUTR_CHECK(finite, "INT4 KV cache: a K/V row holds a non-finite value");
  const float s = amax / 7.0f;
  if (s == 0.0f) {
    std::fill(q, q + d, int8_t(0));
    return 0.0f;
  }
  for (int i = 0; i < d; ++i) q[i] = int8_t(std::clamp(round_half_even(x[i] / s), -7.0f, 7.0f));
  return s;
}

float kv_int4_store_row(const KvInt4Half& m, int slot, int head, const float* x) {
  const int D = m.head_dim;
  FUTR_ASSERT(D % 16 == 0 && D <= 1024 && slot >= 0 && slot < m.num_slots && head >= 0 && head < m.kv_heads);
  int8_t q[1024];
  const float s = kv_int4_quantize_row(x, D, q);
  m.scales[layout::kv_scale_index(m.num_slots, slot, head)] = s;
  for (int d = 0; d < D; ++d) {
    const layout::KvNibble p = m.key ? layout::kv_key_nibble(m.kv_heads, D, slot, head, d)
                                     : layout::kv_value_nibble(m.kv_heads, D, slot, head, d);
    m.nibbles[p.byte] = uint8_t((m.nibbles[p.byte] & ~(0xf << p.shift)) | ((q[d] + 8) << p.shift));
  }
  return s;
}

float kv_int4_load(const KvInt4Half& m, int slot, int head, int d) {
  const layout::KvNibble p = m.key ? layout::kv_key_nibble(m.kv_heads, m.head_dim, slot, head, d)
                                   : layout::kv_value_nibble(m.kv_heads, m.head_dim, slot, head, d);
  const float s = m.scales[layout::kv_scale_index(m.num_slots, slot, head)];
  return float(int((m.nibbles[p.byte] >> p.shift) & 0xf) - 8) * s;
}

}  // namespace futr::quant
