// FP8 activations of the prefill path on the device: the delayed-scaling
// state of every activation site (the device twin of quant::ScaleBank for
// one request group) and the kernels that use it:
//
//   DeviceScaleBank        one Fp8SiteState per site + its amax window, set up
//                          from a quant::DelayedScalingConfig and each site's
//                          initial amax (the calibrated ones of a .futr file);
//   fp8_quantize_rows()    BF16 rows -> E4M3 with the site's scale, the
//                          folded RMSNorm optionally normalized in the cast,
//                          recording the call's amax / saturation / non-finite
//                          values (kernels/sm90_fp8_quantize.cuh);
//   DeviceScaleBank::update()  after the calls: each record enters its site's
//                          window and sets the next call's scale
//                          (kernels/sm90_fp8_scale_update.cuh).
// The SwiGLU epilogue records into a site the same way: its scale_in /
// amax_out / saturation_out are &site->scale / &site->amax / &site->saturated.
// Policy: "clamp" (re-scale on the next call), the one a CUDA graph can run;
// "recompute" needs the host and stays a CPU-reference option.
// Every launch is graph-capturable (no allocation, no synchronization).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/layout/fp8_site.cuh"
#include "launch/buffer.h"
#include "quant/delayed_scaling.h"

namespace futr::cuda {

using Fp8SiteState = layout::Fp8SiteState;

class DeviceScaleBank {
 public:
  // initial_amax: one per site (> 0, finite); config.policy must be kClampRescale.
  DeviceScaleBank(const quant::DelayedScalingConfig& config, std::span<const float> initial_amax);
  int sites() const { return n_; }
  Fp8SiteState* site(int i) const;  // device pointer
  // Records the calls of sites [first, first + count) (each called once since
  // the last update; a site not called records nothing: do not list it).
  void update(int first, int count, cudaStream_t s, bool pdl = false);
  // Back to the initial state (every window empty, scales from the initial amax).
  void reset(cudaStream_t s = nullptr);
  struct Snapshot {
    float scale;
    quant::ScaleStats stats;
  };
  std::vector<Snapshot> download(cudaStream_t s = nullptr) const;  // synchronizes
  const quant::DelayedScalingConfig& config() const { return config_; }
  std::span<const float> initial_amax() const { return initial_; }

 private:
  quant::DelayedScalingConfig config_;
  std::vector<float> initial_;
  int n_ = 0;
  DeviceBuffer<Fp8SiteState> sites_;
  DeviceBuffer<float> ring_;  // [n][history]
};

struct Fp8QuantizeArgs {
  const uint16_t* x = nullptr;  // [rows][ld_x] BF16 (16-byte aligned rows)
  int64_t ld_x = 0;             // 0: K
  uint8_t* out = nullptr;       // [rows][ld_out] E4M3 (8-byte aligned rows)
  int64_t ld_out = 0;           // 0: K
  int rows = 0, K = 0;          // K % 8 == 0, K <= 16384
  bool fold_rms = false;        // y = bf16(x / rms(x)) (the folded RMSNorm's factor in the cast)
  float eps = 1e-5f;
  Fp8SiteState* site = nullptr;
};

void fp8_quantize_rows(const Fp8QuantizeArgs& a, cudaStream_t s, bool pdl = false);

}  // namespace futr::cuda
