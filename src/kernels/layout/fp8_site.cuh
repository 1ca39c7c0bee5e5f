// The device state of one FP8 activation site of the prefill path: the
// contract between the host's scale bank (src/launch/fp8_scaling.h), the
// kernels that quantize into a site and record the call
// (kernels/sm90_fp8_quantize.cuh, the SwiGLU epilogue through its
// scale_in / amax_out / saturation_out pointers) and the state update
// (kernels/sm90_fp8_scale_update.cuh). Host code includes it too.
//
// Lifetime of a call's record: the quantizing kernel max-reduces |y| into
// `amax` (atomicMax on the bits of a non-negative float) and adds to
// `saturated` / `nonfinite`; the update reads and zeroes them, and sets
// `scale` for the next call (quant/delayed_scaling.h is the rule).
#pragma once

#include <cstdint>

namespace futr::layout {

struct Fp8SiteState {
  float scale = 1.f;       // dequantization scale s of the next call
  float amax = 0.f;        // this call's max |y| of the finite values (zeroed by the update)
  uint32_t saturated = 0;  // this call's values with |y / s| > 448 (zeroed by the update)
  uint32_t nonfinite = 0;  // this call's NaN / Inf values (zeroed by the update)
  uint32_t next = 0;       // ring position of the next record in the site's amax window
  uint32_t pad = 0;
  // The counters of quant::ScaleStats, kept on the device.
  unsigned long long calls = 0, saturated_calls = 0, saturated_values = 0, zero_calls = 0,
                     nonfinite_calls = 0;
  float max_amax = 0.f;  // largest finite amax recorded
  float pad2 = 0.f;
};
static_assert(sizeof(Fp8SiteState) == 72, "Fp8SiteState: a fixed layout shared by host and device");

}  // namespace futr::layout
