// CPU reference of the LM head (see lm_head_ref.h).
#include "reference/lm_head_ref.h"

#include <vector>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::ref {

void lm_head(std::span<const uint16_t> w, std::span<const uint16_t> x, int m, int n, int k,
             std::span<float> out, int64_t ld, std::span<const int> rows) {
  FUTR_CHECK(m >= 0 && n >= 0 && k >= 0 && ld >= n, "ref::lm_head: m {} n {} k {} ld {}", m, n, k, ld);
  FUTR_CHECK(w.size() >= size_t(n) * size_t(k) && x.size() >= size_t(m) * size_t(k) &&
                 (m == 0 || out.size() >= size_t(m - 1) * size_t(ld) + size_t(n)),
             "ref::lm_head: buffers too small");
  std::vector<double> xf(size_t(m) * size_t(k));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = double(bf16_to_float(x[i]));
  auto one = [&](int v) {
    std::vector<double> wv(static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) wv[size_t(j)] = double(bf16_to_float(w[size_t(v) * size_t(k) + size_t(j)]));
    for (int r = 0; r < m; ++r) {
      double s = 0;
      const double* xr = xf.data() + size_t(r) * size_t(k);
      for (int j = 0; j < k; ++j) s += xr[j] * wv[size_t(j)];
      out[size_t(r) * size_t(ld) + size_t(v)] = float(s);
    }
  };
  if (rows.empty()) {
    for (int v = 0; v < n; ++v) one(v);
  } else {
    for (int v : rows) {
      FUTR_CHECK(v >= 0 && v < n, "ref::lm_head: row {} outside 0..{}", v, n - 1);
      one(v);
    }
  }
}

}  // namespace futr::ref
