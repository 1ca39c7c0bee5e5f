// RoPE frequencies (see rope.h).
#include "model/rope.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace futr {

std::vector<double> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling) {
  FUTR_CHECK(head_dim > 0 && head_dim % 2 == 0, "RoPE: head_dim {} must be even", head_dim);
  const int half = head_dim / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) f[size_t(i)] = std::pow(double(theta), -2.0 * i / head_dim);
  if (scaling.type == "none") return f;
  FUTR_CHECK(scaling.type == "llama3", "RoPE: unsupported scaling '{}'", scaling.type);
  FUTR_CHECK(scaling.factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor &&
                 scaling.low_freq_factor > 0 && scaling.original_max_position > 0,
             "RoPE llama3 scaling: invalid parameters (factor {}, low {}, high {}, original "
             "context {})",
             scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor,
             scaling.original_max_position);
  const double L0 = scaling.original_max_position;
  const double lo = scaling.low_freq_factor, hi = scaling.high_freq_factor;
  const double factor = scaling.factor;
  const double wl_high = L0 / hi;  // wavelengths shorter than this: unchanged
  const double wl_low = L0 / lo;   // wavelengths longer than this: divided by factor
  for (auto& fi : f) {
    const double wl = 2.0 * std::numbers::pi / fi;
    if (wl < wl_high) continue;
    if (wl > wl_low) {
      fi /= factor;
      continue;
    }
    const double s = (L0 / wl - lo) / (hi - lo);  // 0 at wl_low .. 1 at wl_high
    fi = (1.0 - s) * fi / factor + s * fi;
  }
  return f;
}

std::vector<double> rope_freq_factors(int head_dim, float theta, const RopeScaling& scaling) {
  const std::vector<double> base = rope_inv_freq(head_dim, theta, RopeScaling{});
  const std::vector<double> f = rope_inv_freq(head_dim, theta, scaling);
  std::vector<double> r(f.size());
  for (size_t i = 0; i < f.size(); ++i) r[i] = base[i] / f[i];
  return r;
}

}  // namespace futr
