// Launchers of the decode path's small kernels (the GEMMs are cuda/w4a16.h and
// cuBLASLt, attention cuda/decode_attention.h): the residual + RMSNorm step
// (with the embedding gather), RoPE in place, SwiGLU. Graph-capturable.
// Kernels: src/device/kernels/sm90_{rmsnorm,rope,swiglu}.cuh; their CPU
// reference is cpu/ops.h. Test: tests/device/decode_ops_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace futr::cuda {

struct RmsNormArgs {
  float* x = nullptr;              // [rows][H] FP32 residual, in place
  const void* add = nullptr;       // optional [rows][ld_add] BF16 added to x first
  int64_t ld_add = 0;
  const int* tokens = nullptr;     // optional [rows] ids: x = embd[token] first
  const void* embd = nullptr;      // [vocab][H] BF16
  const void* gain = nullptr;      // [H] BF16
  void* out = nullptr;             // [rows][H] BF16
  int rows = 0, H = 0;
  float eps = 1e-5f;
};
void rmsnorm(const RmsNormArgs& a, cudaStream_t s);

// Rotates the first `heads` heads of each BF16 row (stride ld) at its position.
void rope(void* x, int64_t ld, const int* pos, const float* cos, const float* sin, int rows, int heads, int D,
          cudaStream_t s);

// out[rows][I] = bf16(silu(gate) * up) of gu[rows][2I] (gate columns first).
void swiglu(const void* gu, void* out, int rows, int I, cudaStream_t s);

}  // namespace futr::cuda
