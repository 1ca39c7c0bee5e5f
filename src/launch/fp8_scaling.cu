// Launchers of the FP8 activation kernels and the device scale bank (see
// fp8_scaling.h).
#include "launch/fp8_scaling.h"

#include <cmath>

#include "core/error.h"
#include "kernels/sm90_fp8_quantize.cuh"
#include "kernels/sm90_fp8_scale_update.cuh"
#include "launch/check.h"
#include "launch/launch.cuh"

namespace futr::cuda {

DeviceScaleBank::DeviceScaleBank(const quant::DelayedScalingConfig& config,
                                 std::span<const float> initial_amax)
    : config_(config), initial_(initial_amax.begin(), initial_amax.end()), n_(int(initial_amax.size())) {
  config_.validate();
  FUTR_CHECK(config_.policy == Fp8SaturationPolicy::kClampRescale,
             "FP8 scaling on the GPU: only the \"clamp\" saturation policy runs inside a CUDA graph "
             "(\"recompute\" is a CPU-reference option)");
  FUTR_CHECK(n_ >= 1, "FP8 scaling: no sites");
  for (int i = 0; i < n_; ++i)
    FUTR_CHECK(std::isfinite(initial_[size_t(i)]) && initial_[size_t(i)] > 0.0f,
               "FP8 scaling: initial amax {} of site {} must be finite and positive", initial_[size_t(i)], i);
  sites_ = DeviceBuffer<Fp8SiteState>(size_t(n_));
  ring_ = DeviceBuffer<float>(size_t(n_) * size_t(config_.history));
  reset();
}

Fp8SiteState* DeviceScaleBank::site(int i) const {
  FUTR_CHECK(i >= 0 && i < n_, "FP8 scaling: no site {} ({} sites)", i, n_);
  return sites_.get() + i;
}

void DeviceScaleBank::reset(cudaStream_t s) {
  std::vector<Fp8SiteState> h(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) h[size_t(i)].scale = quant::next_scale(initial_[size_t(i)], config_.margin);
  sites_.upload(h, s);
  FUTR_CUDA_CHECK(cudaMemsetAsync(ring_.get(), 0, ring_.bytes(), s));
  FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
}

void DeviceScaleBank::update(int first, int count, cudaStream_t s, bool pdl) {
  FUTR_CHECK(first >= 0 && count >= 1 && first + count <= n_, "FP8 scaling: sites [{}, {}) of {}", first,
             first + count, n_);
  device::Fp8ScaleUpdateParams p;
  p.sites = sites_.get() + first;
  p.ring = ring_.get() + size_t(first) * size_t(config_.history);
  p.n = count;
  p.history = config_.history;
  p.margin = config_.margin;
  p.frozen = config_.scaling == Fp8Scaling::kStatic;
  launch(&device::sm90_fp8_scale_update_kernel, dim3((count + 127) / 128), dim3(128), 0, s, pdl, p);
}

std::vector<DeviceScaleBank::Snapshot> DeviceScaleBank::download(cudaStream_t s) const {
  const std::vector<Fp8SiteState> h = sites_.download(s);
  std::vector<Snapshot> out;
  for (const Fp8SiteState& d : h) {
    quant::ScaleStats st;
    st.calls = d.calls;
    st.saturated_calls = d.saturated_calls;
    st.saturated_values = d.saturated_values;
    st.zero_calls = d.zero_calls;
    st.nonfinite_calls = d.nonfinite_calls;
    st.max_amax = d.max_amax;
    out.push_back({d.scale, st});
  }
  return out;
}

void fp8_quantize_rows(const Fp8QuantizeArgs& a, cudaStream_t s, bool pdl) {
  FUTR_CHECK(a.K >= 8 && a.K % 8 == 0 && a.K <= device::kFp8QuantMaxK,
             "FP8 quantize: K {} must be a multiple of 8 in 8..{}", a.K, device::kFp8QuantMaxK);
  FUTR_CHECK(a.rows >= 1 && a.rows <= (1 << 30), "FP8 quantize: {} rows", a.rows);
  FUTR_CHECK(a.x && a.out && a.site, "FP8 quantize: a pointer is null");
  const int64_t ld_x = a.ld_x ? a.ld_x : a.K, ld_out = a.ld_out ? a.ld_out : a.K;
  FUTR_CHECK(ld_x >= a.K && ld_x % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0,
             "FP8 quantize: the input rows must be 16-byte aligned (stride {} elements)", ld_x);
  FUTR_CHECK(ld_out >= a.K && ld_out % 8 == 0 && reinterpret_cast<uintptr_t>(a.out) % 8 == 0,
             "FP8 quantize: the output rows must be 8-byte aligned (stride {} bytes)", ld_out);
  FUTR_CHECK(std::isfinite(a.eps) && a.eps > 0.0f, "FP8 quantize: eps {} must be positive", a.eps);
  device::Fp8QuantizeParams p;
  p.x = a.x;
  p.ld_x = ld_x;
  p.out = a.out;
  p.ld_out = ld_out;
  p.rows = a.rows;
  p.K = a.K;
  p.fold_rms = a.fold_rms;
  p.eps = a.eps;
  p.site = a.site;
  const int team = device::fp8_quantize_team(a.K);
  const int rows_per_cta = device::kFp8QuantThreads / team;
  launch(&device::sm90_fp8_quantize_kernel, dim3(unsigned((a.rows + rows_per_cta - 1) / rows_per_cta)),
         dim3(device::kFp8QuantThreads), 0, s, pdl, p, team);
}

}  // namespace futr::cuda
