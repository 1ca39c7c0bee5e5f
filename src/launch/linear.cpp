#include "launch/linear.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "launch/device.h"

namespace futr::cuda {

QuantLinear::QuantLinear(DecodeWeights f, int n, int k, int group, size_t weight_bytes, size_t scale_bytes,
                         int max_m)
    : format_(f), n_(n), k_(k), group_(group), max_m_(max_m), sm_count_(require_device().sm_count) {
  FUTR_CHECK(max_m >= 1 && max_m <= 64, "QuantLinear: max_m = {} outside 1..64", max_m);
  FUTR_CHECK(n >= 16 && n % 16 == 0 && k >= 64 && k % 64 == 0,
             "QuantLinear: shape N = {}, K = {} unsupported (N % 16 == 0, K % 64 == 0 required)", n, k);
  if (f == DecodeWeights::kInt4)
    FUTR_CHECK((group == 64 || group == 128) && k % group == 0,
               "W4Linear: group {} with K = {} unsupported (group 64 or 128 dividing K)", group, k);
  w_ = DeviceBuffer<uint8_t>(weight_bytes);
  scales_ = DeviceBuffer<uint8_t>(scale_bytes);
  size_t ws = 0, ctr = 0;
  for (int m = 1; m <= max_m; ++m) {
    const DecodeConfig c = config(m);
    ws = std::max(ws, decode_workspace_floats(c, m, n, k));
    ctr = std::max(ctr, decode_counters(c, n));
  }
  // Counters: enough for any configuration (one per 16-channel tile bounds every grid).
  ctr = std::max(ctr, size_t(n / 16));
  if (ws) ws_ = DeviceBuffer<float>(ws);
  counters_ = DeviceBuffer<uint32_t>(ctr);
  counters_.fill_bytes(0);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
}

// FUTR_DECODE_CONFIG_M8 (a measurement knob, docs/PERF.md): overrides in
// apply_overrides' syntax for the launches of M <= 8 rows, e.g. "kernel=gemv,splits=2".
DecodeConfig linear_config(DecodeWeights f, int m, int n, int k, int sm_count, int group) {
  DecodeConfig c = decode_heuristic(f, m, n, k, sm_count, group);
  static const std::string override_m8 = [] {
    const char* e = std::getenv("FUTR_DECODE_CONFIG_M8");
    return std::string(e ? e : "");
  }();
  if (m <= 8 && !override_m8.empty()) c = apply_overrides(c, override_m8);
  return c;
}

DecodeConfig QuantLinear::config(int m) const { return linear_config(format_, m, n_, k_, sm_count_, group_); }

void QuantLinear::forward(const void* x, void* y, int m, cudaStream_t s) const {
  forward(x, y, m, config(m), s);
}

DecodeArgs QuantLinear::args(const void* x, void* y, int m, bool x_swiglu,
                             const DecodeNormInput* norm) const {
  FUTR_CHECK(m >= 1 && m <= max_m_, "QuantLinear: M = {} outside 1..{}", m, max_m_);
  DecodeArgs a;
  a.w = w_.get();
  a.scales = scales_.get();
  a.x = x;
  a.y = y;
  a.ws = ws_.get();
  a.ws_floats = ws_.size();
  a.counters = counters_.get();
  a.n_counters = counters_.size();
  a.m = m;
  a.n = n_;
  a.k = k_;
  a.group = group_;
  a.x_swiglu = x_swiglu;
  a.norm = norm;
  return a;
}

void QuantLinear::forward(const void* x, void* y, int m, const DecodeConfig& c, cudaStream_t s, bool x_swiglu,
                          const DecodeNormInput* norm) const {
  decode_gemm(format_, args(x, y, m, x_swiglu, norm), c, s);
}

void QuantLinear::reserve(const DecodeConfig& c, int m) {
  const size_t need = decode_workspace_floats(c, m, n_, k_);
  if (need > ws_.size()) ws_ = DeviceBuffer<float>(need);
}

W4Linear::W4Linear(int n, int k, int group, int max_m)
    : QuantLinear(DecodeWeights::kInt4, n, k, group, size_t(n) * size_t(k) / 2,
                  size_t(n) * size_t(k / std::max(group, 1)) * 2, max_m) {}

W4Linear::W4Linear(int n, int k, int group, std::span<const uint8_t> packed, std::span<const uint16_t> scales,
                   int max_m)
    : W4Linear(n, k, group, max_m) {
  upload(packed, scales);
}

void W4Linear::upload(std::span<const uint8_t> packed, std::span<const uint16_t> scales) {
  FUTR_CHECK(packed.size() == w_.bytes() && scales.size() * 2 == scales_.bytes(),
             "W4Linear::upload: {} weight bytes and {} scales given, {} and {} expected", packed.size(),
             scales.size(), w_.bytes(), scales_.bytes() / 2);
  w_.upload(packed.data(), packed.size());
  scales_.upload(reinterpret_cast<const uint8_t*>(scales.data()), scales.size() * 2);
}

W8Linear::W8Linear(int n, int k, int max_m)
    : QuantLinear(DecodeWeights::kE4M3, n, k, 0, size_t(n) * size_t(k), size_t(n) * 4, max_m) {}

W8Linear::W8Linear(int n, int k, std::span<const uint8_t> packed, std::span<const float> scales, int max_m)
    : W8Linear(n, k, max_m) {
  upload(packed, scales);
}

void W8Linear::upload(std::span<const uint8_t> packed, std::span<const float> scales) {
  FUTR_CHECK(packed.size() == w_.bytes() && scales.size() * 4 == scales_.bytes(),
             "W8Linear::upload: {} weight bytes and {} scales given, {} and {} expected", packed.size(),
             scales.size(), w_.bytes(), scales_.bytes() / 4);
  w_.upload(packed.data(), packed.size());
  scales_.upload(reinterpret_cast<const uint8_t*>(scales.data()), scales.size() * 4);
}

}  // namespace futr::cuda
