// CPU reference of the logits reductions (see logits_reduce_ref.h).
#include "reference/logits_reduce_ref.h"

#include <cmath>
#include <limits>

namespace futr::ref {

LogitsStats logits_reduce(std::span<const float> z, int target) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  LogitsStats s;
  s.max = std::numeric_limits<float>::quiet_NaN();
  bool any = false;
  for (size_t i = 0; i < z.size(); ++i) {
    const float v = z[i];
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) ++s.nonfinite;
    if (std::isnan(v)) continue;
    if (!any || v > s.max) {
      s.max = v;
      s.argmax = int(i);
      any = true;
    }
  }
  if (!any) s.lse = std::numeric_limits<double>::quiet_NaN();
  else if (s.max == -std::numeric_limits<float>::infinity()) s.lse = -kInf;
  else if (s.max == std::numeric_limits<float>::infinity()) s.lse = kInf;
  else {
    double sum = 0.0;
    for (float v : z)
      if (!std::isnan(v)) sum += std::exp(double(v) - double(s.max));
    s.lse = double(s.max) + std::log(sum);
  }
  if (target >= 0 && size_t(target) < z.size())
    s.logprob = s.lse == -kInf ? -kInf : double(z[size_t(target)]) - s.lse;
  return s;
}

}  // namespace futr::ref
