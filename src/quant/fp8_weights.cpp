// FP8 E4M3 per-channel weights and RMSNorm gain folding (see fp8_weights.h).
#include "quant/fp8_weights.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::quant {

float Fp8Weights::dequant(int row, int col) const {
  return e4m3_to_float(w[size_t(row) * size_t(k) + size_t(col)]) * scale[size_t(row)];
}

std::vector<float> fold_gain(std::span<const float> w, int n, int k, std::span<const float> gain) {
  FUTR_CHECK(w.size() == size_t(n) * size_t(k) && gain.size() == size_t(k),
             "fold_gain: weight of {} values for [{}, {}] with a gain of {}", w.size(), n, k, gain.size());
  std::vector<float> out(w.size());
  for (size_t r = 0; r < size_t(n); ++r)
    for (size_t c = 0; c < size_t(k); ++c) out[r * size_t(k) + c] = w[r * size_t(k) + c] * gain[c];
  return out;
}

Fp8Weights quantize_fp8(std::span<const float> w, int n, int k, bool folded_gain, const std::string& name) {
  FUTR_CHECK(n > 0 && k > 0 && w.size() == size_t(n) * size_t(k), "{}: {} values for an FP8 weight [{}, {}]",
             name, w.size(), n, k);
  Fp8Weights out{n, k, std::vector<uint8_t>(w.size()), std::vector<float>(size_t(n)), folded_gain};
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n; ++r) {
    const float* row = w.data() + size_t(r) * size_t(k);
    float amax = 0.0f;
    bool finite = true;
    for (int c = 0; c < k; ++c) {
      finite = finite && std::isfinite(row[c]);
      amax = std::max(amax, std::fabs(row[c]));
    }
    // An all-zero row keeps scale 1 (any scale represents it exactly); a row
    // of tiny values gets the smallest scale (see kFp8MinWeightScale).
    const float s = (finite && amax > 0.0f) ? std::max(amax / kE4M3Max, kFp8MinWeightScale) : 1.0f;
    out.scale[size_t(r)] = finite ? s : NAN;
    for (int c = 0; c < k; ++c) out.w[size_t(r) * size_t(k) + size_t(c)] = float_to_e4m3(row[c] / s);
  }
  for (int r = 0; r < n; ++r) {
    FUTR_CHECK(std::isfinite(out.scale[size_t(r)]), "{}: row {} holds a non-finite weight", name, r);
    FUTR_CHECK(out.scale[size_t(r)] <= kFp8MaxWeightScale,
               "{}: row {} holds a weight of magnitude {} (FP8 weights are stored up to {})", name, r,
               out.scale[size_t(r)] * kE4M3Max, kFp8MaxWeightScale * kE4M3Max);
  }
  return out;
}

std::vector<float> dequantize_fp8(const Fp8Weights& w) {
  FUTR_CHECK(w.w.size() == size_t(w.n) * size_t(w.k) && w.scale.size() == size_t(w.n),
             "dequantize_fp8: {} bytes and {} scales for [{}, {}]", w.w.size(), w.scale.size(), w.n, w.k);
  std::vector<float> out(w.w.size());
  for (size_t r = 0; r < size_t(w.n); ++r)
    for (size_t c = 0; c < size_t(w.k); ++c)
      out[r * size_t(w.k) + c] = e4m3_to_float(w.w[r * size_t(w.k) + c]) * w.scale[r];
  return out;
}

}  // namespace futr::quant
