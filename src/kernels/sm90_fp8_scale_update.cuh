// sm90_fp8_scale_update: the delayed-scaling state machine of
// quant::DelayedScale::record (policy "clamp", the CUDA-graph one) on the
// device, one thread per FP8 activation site: after a call that used
// `scale`, its record (amax, saturated, nonfinite; written by the quantizing
// kernel or the SwiGLU epilogue) enters the site's amax window and sets the
// scale of the next call; the record is zeroed for that call.
//
//   calls += 1;  saturated > 0: saturated_calls += 1, saturated_values += saturated
//   nonfinite > 0 or amax not finite: nonfinite_calls += 1 (not recorded; scale kept)
//   else: amax == 0: zero_calls += 1; max_amax = max(max_amax, amax);
//         ring[next] = amax; next = (next + 1) % history; m = max(ring);
//         m > 0: scale = clamp(m * margin / 448 * (1 + 2^-20), 2^-120, 2^120)
//   frozen (static scaling): the counters and max_amax only; the scale stays.
//
// The same FP32 operations in the same order as quant::next_scale, so the
// device state equals the CPU state machine's bit for bit on the same call
// sequence (tests/kernels/fp8_scaling_test.cpp).
#pragma once

#include <cstdint>

#include "kernels/layout/fp8_site.cuh"
#include "kernels/ptx/pdl.cuh"

namespace futr::device {

using layout::Fp8SiteState;

struct Fp8ScaleUpdateParams {
  Fp8SiteState* sites = nullptr;  // [n]
  float* ring = nullptr;          // [n][history] amax windows
  int n = 0, history = 1;
  float margin = 1.f;
  bool frozen = false;  // static scales: count the call, keep the scale (no window)
};

__global__ void sm90_fp8_scale_update_kernel(const Fp8ScaleUpdateParams p) {
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();  // the records come from the kernels before
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  Fp8SiteState& s = p.sites[i];
  const float amax = s.amax;
  const uint32_t sat = s.saturated, bad = s.nonfinite;
  s.amax = 0.f;
  s.saturated = 0;
  s.nonfinite = 0;
  ++s.calls;
  if (sat > 0) {
    ++s.saturated_calls;
    s.saturated_values += sat;
  }
  if (bad > 0 || !isfinite(amax)) {
    ++s.nonfinite_calls;
    return;
  }
  if (amax == 0.f) ++s.zero_calls;
  s.max_amax = fmaxf(s.max_amax, amax);
  if (p.frozen) return;  // static scaling (quant::DelayedScalingConfig::scaling)
  float* ring = p.ring + size_t(i) * size_t(p.history);
  ring[s.next] = amax;
  s.next = (s.next + 1) % uint32_t(p.history);
  float m = 0.f;
  for (int k = 0; k < p.history; ++k) m = fmaxf(m, ring[k]);
  if (m > 0.f) {
    const float v = m * p.margin / 448.f * (1.0f + 0x1p-20f);
    s.scale = fminf(fmaxf(v, 0x1p-120f), 0x1p120f);
  }
}

}  // namespace futr::device
