// INT4 group scales, RTN and the clipping search (see int4_quant.h).
#include "quant/int4_quant.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::quant {

int int4_group_for(int k, const std::string& what) {
  if (k > 0 && k % 128 == 0) return 128;
  if (k > 0 && k % 64 == 0) return 64;
  fail("{}: INT4 needs K to be a multiple of 64 (group 128 or 64); K = {}", what, k);
}

uint16_t int4_scale_fp16(float amax, float c) {
  const float s = 2.0f * c * amax / 15.0f;
  FUTR_CHECK(std::isfinite(s), "INT4 scale of a group with amax {} is not finite", amax);
  FUTR_CHECK(s <= 65504.0f, "INT4 scale {} of a group with amax {} overflows FP16", s, amax);
  return float_to_fp16(s);
}

int8_t int4_quantize_value(float w, float s) {
  if (s == 0.0f) return 0;
  const float r = round_half_even(w / s);
  return int8_t(std::clamp(r, -8.0f, 7.0f));
}

namespace {

// Error of quantizing w with scale s (weights d, or 1).
double group_error(std::span<const float> w, std::span<const float> d, float s) {
  double e = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double r = double(w[i]) - double(s) * int4_quantize_value(w[i], s);
    e += (d.empty() ? 1.0 : double(d[i])) * r * r;
  }
  return e;
}

}  // namespace

uint16_t int4_quantize_group(std::span<const float> w, std::span<const float> d, const ClipSearch& clip,
                             std::span<int8_t> q) {
  FUTR_ASSERT(q.size() == w.size() && (d.empty() || d.size() == w.size()));
  float amax = 0.0f;
  for (float v : w) {
    FUTR_CHECK(std::isfinite(v), "INT4 quantization: a weight is not finite ({})", v);
    amax = std::max(amax, std::fabs(v));
  }
  uint16_t best = int4_scale_fp16(amax, 1.0f);
  if (clip.enabled && amax > 0.0f) {
    FUTR_CHECK(clip.steps >= 1 && clip.c_min > 0.0f && clip.c_min < 1.0f,
               "clipping search: steps {} / c_min {} out of range", clip.steps, clip.c_min);
    double best_err = group_error(w, d, fp16_to_float(best));
    for (int j = 1; j <= clip.steps; ++j) {
      const float c = 1.0f - float(j) * (1.0f - clip.c_min) / float(clip.steps);
      const uint16_t s16 = int4_scale_fp16(amax, c);
      const double e = group_error(w, d, fp16_to_float(s16));
      if (e < best_err) {  // strict: ties keep the larger scale (less clipping)
        best_err = e;
        best = s16;
      }
    }
  }
  const float s = fp16_to_float(best);
  for (size_t i = 0; i < w.size(); ++i) q[i] = int4_quantize_value(w[i], s);
  return best;
}

Int4Weights quantize_int4(std::span<const float> w, int n, int k, int group, const ClipSearch& clip,
                          std::span<const float> diag, const std::string& name) {
  if (group == 0) group = int4_group_for(k, name);
  FUTR_CHECK(n > 0 && k > 0 && (group == 64 || group == 128) && k % group == 0,
             "{}: cannot quantize [{}, {}] to INT4 with group {}", name, n, k, group);
  FUTR_CHECK(w.size() == size_t(n) * size_t(k), "{}: {} values for a [{}, {}] weight", name, w.size(), n, k);
  FUTR_CHECK(diag.empty() || diag.size() == size_t(k), "{}: {} error weights for K = {}", name, diag.size(),
             k);
  Int4Weights out{n, k, group, std::vector<int8_t>(size_t(n) * size_t(k)),
                  std::vector<uint16_t>(size_t(n) * size_t(k / group))};
  const int groups = k / group;
  // NOTE: an exception must not leave an OpenMP region: the first one is kept and rethrown.
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 16)
  for (int r = 0; r < n; ++r) {
    try {
      for (float v : w.subspan(size_t(r) * size_t(k), size_t(k)))  // (checked row by row on every core)
        FUTR_CHECK(std::isfinite(v), "{}: INT4 quantization: a weight is not finite ({})", name, v);
      for (int g = 0; g < groups; ++g) {
        const size_t o = size_t(r) * size_t(k) + size_t(g) * size_t(group);
        std::span<const float> dg =
            diag.empty() ? std::span<const float>() : diag.subspan(size_t(g) * size_t(group), size_t(group));
        out.scale[size_t(r) * size_t(groups) + size_t(g)] = int4_quantize_group(
            w.subspan(o, size_t(group)), dg, clip, std::span<int8_t>(out.q).subspan(o, size_t(group)));
      }
    } catch (...) {
#pragma omp critical(futr_int4_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::vector<float> dequantize_int4(const Int4Weights& w) {
  const int groups = w.k / w.group;
  FUTR_CHECK(w.q.size() == size_t(w.n) * size_t(w.k) && w.scale.size() == size_t(w.n) * size_t(groups),
             "dequantize_int4: {} values and {} scales for [{}, {}] group {}", w.q.size(), w.scale.size(),
             w.n, w.k, w.group);
  std::vector<float> out(w.q.size());
  for (int r = 0; r < w.n; ++r)
    for (int g = 0; g < groups; ++g) {
      const float s = fp16_to_float(w.scale[size_t(r) * size_t(groups) + size_t(g)]);
      const size_t o = size_t(r) * size_t(w.k) + size_t(g) * size_t(w.group);
      for (int i = 0; i < w.group; ++i) out[o + size_t(i)] = float(w.q[o + size_t(i)]) * s;
    }
  return out;
}

double int4_squared_error(std::span<const float> w, const Int4Weights& q, std::span<const float> diag) {
  const std::vector<float> d = dequantize_int4(q);
  FUTR_ASSERT(d.size() == w.size());
  double e = 0.0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double r = double(w[i]) - double(d[i]);
    e += (diag.empty() ? 1.0 : double(diag[i % size_t(q.k)])) * r * r;
  }
  return e;
}

}  // namespace futr::quant
