// W4Linear / W8Linear: a quantized linear layer on the GPU for decode,
//   y[M,N] (BF16) = x[M,K] (BF16) * W[N,K]^T,   1 <= M <= max_m <= 64 (M > 32: two launches),
// owning its packed weights, scales and split-K workspace in device memory.
//
//   W4Linear: INT4 weights + FP16 group scales (group 128 or 64), both in the
//             fragment order of src/kernels/layout/int4_fragment.cuh, as produced
//             by quant::pack_int4 (src/quant/int4_pack.h).
//   W8Linear: E4M3 weights (quant::pack_e4m3) + one FP32 scale per output channel.
//
// forward() only launches (no allocation, no synchronization), so it can be
// captured into a CUDA graph. The workspace is sized at construction for every
// M <= max_m under the heuristic; reserve() grows it for an override before any
// capture. One forward at a time per object (the workspace is shared).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "launch/buffer.h"
#include "launch/w4a16.h"

namespace futr::cuda {

// The configuration a QuantLinear of (N, K, group) runs M rows with on a GPU of
// `sm_count` multiprocessors: decode_heuristic(), then the measurement knob
// FUTR_DECODE_CONFIG_M8 (apply_overrides' syntax, launches of M <= 8 rows).
// A pure function of its arguments and the environment (no device query), so
// a step plan can be built and inspected without a GPU.
DecodeConfig linear_config(DecodeWeights f, int m, int n, int k, int sm_count, int group);

class QuantLinear {
 public:
  int n() const { return n_; }
  int k() const { return k_; }
  int group() const { return group_; }
  DecodeWeights format() const { return format_; }
  // The configuration forward(x, y, m, s) uses.
  DecodeConfig config(int m) const;
  // y = x W^T with the heuristic's configuration / an explicit one.
  void forward(const void* x, void* y, int m, cudaStream_t s) const;
  // x_swiglu: x is [M, 2K] gate|up and the input bf16(silu(gate) * up) (the gemv kernel only, M <= 8).
  // norm: the input is bf16(RMSNorm(norm->x + norm->add) gain) (the gemv only, M <= 8; x unused).
  void forward(const void* x, void* y, int m, const DecodeConfig& c, cudaStream_t s, bool x_swiglu = false,
               const DecodeNormInput* norm = nullptr) const;
  // The arguments forward() hands decode_gemm (this layer's weights, scales
  // and split-K workspace), for an executor that runs the GEMM another way.
  DecodeArgs args(const void* x, void* y, int m, bool x_swiglu = false,
                  const DecodeNormInput* norm = nullptr) const;
  // Grows the split-K workspace so that `c` can run with m rows (not during capture).
  void reserve(const DecodeConfig& c, int m);
  // Weight and scale bytes read by one forward (the bandwidth numerator).
  size_t weight_bytes() const { return w_.bytes() + scales_.bytes(); }
  uint8_t* weights() { return w_.get(); }
  void* scales() { return scales_.get(); }
  size_t scale_bytes() const { return scales_.bytes(); }

 protected:
  QuantLinear(DecodeWeights f, int n, int k, int group, size_t weight_bytes, size_t scale_bytes, int max_m);
  DecodeWeights format_;
  int n_, k_, group_, max_m_, sm_count_;
  DeviceBuffer<uint8_t> w_;
  DeviceBuffer<uint8_t> scales_;
  DeviceBuffer<float> ws_;
  DeviceBuffer<uint32_t> counters_;
};

class W4Linear : public QuantLinear {
 public:
  // Uninitialised device weights (fill them, e.g. with fill_random, or upload()).
  W4Linear(int n, int k, int group, int max_m = 64);
  // packed: n*k/2 bytes, scales: n*k/group FP16 bits, both fragment order.
  W4Linear(int n, int k, int group, std::span<const uint8_t> packed, std::span<const uint16_t> scales,
           int max_m = 64);
  void upload(std::span<const uint8_t> packed, std::span<const uint16_t> scales);
};

class W8Linear : public QuantLinear {
 public:
  W8Linear(int n, int k, int max_m = 64);
  // packed: n*k E4M3 bytes in fragment order, scales: n FP32.
  W8Linear(int n, int k, std::span<const uint8_t> packed, std::span<const float> scales, int max_m = 64);
  void upload(std::span<const uint8_t> packed, std::span<const float> scales);
};

}  // namespace futr::cuda
