// Comparison helpers for tests: relative error ||out - ref|| / ||ref|| in
// float64, and a count of non-finite outputs (unwritten poisoned elements show
// up as NaN: tests fill outputs with 0xff bytes, a NaN in BF16/FP32/E4M3).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

namespace futr::test {

struct ErrorStats {
  double rel_l2 = 0;      // ||out - ref||_2 / ||ref||_2
  double max_abs = 0;     // max |out - ref|
  size_t non_finite = 0;  // outputs that are NaN or inf
};

inline ErrorStats compare(std::span<const float> out, std::span<const float> ref) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) {
      ++s.non_finite;
      continue;
    }
    const double d = double(out[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
    s.max_abs = std::fmax(s.max_abs, std::fabs(d));
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

}  // namespace futr::test
