// INT4 KV mirror: row quantization and layout (see kv_int4.h).
#include "quant/kv_int4.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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
  for (int i = 0; i < d; ++i)
    q[i] = int8_t(std::clamp(std::nearbyint(x[i] / s), -7.0f, 7.0f));
  return s;
}

NibblePos kv_key_position(int kv_heads, int head_dim, int slot, int head, int d) {
  FUTR_ASSERT(head_dim % 16 == 0 && d >= 0 && d < head_dim && head >= 0 && head < kv_heads);
  const int tile = slot / kKvTileSlots, g = slot % kKvTileSlots;
  const int s = d / 16, r = d % 16, e = r / 8, c = (r % 8) / 2;
  const int lane = 4 * g + c;
  const size_t tile_bytes = size_t(kKvTileSlots) * size_t(head_dim) / 2;  // 4 * D
  const size_t byte = (size_t(tile) * size_t(kv_heads) + size_t(head)) * tile_bytes +
                      size_t(lane) * size_t(head_dim / 8) + size_t(2 * s + e);
  return {byte, (d % 2) * 4};
}

NibblePos kv_value_position(int kv_heads, int head_dim, int slot, int head, int d) {
  FUTR_ASSERT(head_dim % 2 == 0 && d >= 0 && d < head_dim && head >= 0 && head < kv_heads);
  const size_t byte = (size_t(slot) * size_t(kv_heads) + size_t(head)) * size_t(head_dim / 2) +
                      size_t(d / 2);
  return {byte, (d % 2) * 4};
}

}  // namespace futr::quant
