// CPU reference of the FP8 activation quantizer (see fp8_scaling_ref.h).
#include "reference/fp8_scaling_ref.h"

#include <algorithm>
#include <cmath>

#include "core/numeric.h"

namespace futr::ref {

Fp8QuantizeResult fp8_quantize_rows(const uint16_t* x, int64_t ld, int rows, int K, bool fold, float eps,
                                    float scale) {
  Fp8QuantizeResult res;
  res.q.resize(size_t(rows) * size_t(K));
  const float inv = 1.0f / scale;
  for (int m = 0; m < rows; ++m) {
    const uint16_t* row = x + int64_t(m) * ld;
    float r = 1.0f;
    if (fold) {
      double ss = 0.0;
      for (int k = 0; k < K; ++k) ss += double(bf16_to_float(row[k])) * bf16_to_float(row[k]);
      r = 1.0f / std::sqrt(float(ss) / float(K) + eps);
      res.r.push_back(r);
    }
    for (int k = 0; k < K; ++k) {
      float y = bf16_to_float(row[k]);
      if (fold) y = round_bf16(y * r);
      if (!std::isfinite(y)) {
        ++res.nonfinite;
      } else {
        res.amax = std::max(res.amax, std::fabs(y));
      }
      const float q = y * inv;
      res.saturated += std::fabs(q) > kE4M3Max ? 1u : 0u;
      res.q[size_t(m) * size_t(K) + size_t(k)] = float_to_e4m3(q);
    }
  }
  return res;
}

}  // namespace futr::ref
