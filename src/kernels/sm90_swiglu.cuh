// sm90_swiglu: the SwiGLU between the gate/up GEMM and the down GEMM of the
// decode path (cpu::swiglu is the reference):
//
//   out[r][j] = bf16(silu(g) * u),  g = gu[r][j], u = gu[r][I + j],  silu(g) = g / (1 + exp(-g))
//
// gu is the fused gate/up GEMM's BF16 output [rows][2I] (gate columns first).
// The value and its rounding: kernels/epilogue/swiglu_bf16.cuh (shared with the
// gemv's fused input, sm90_w4a16_gemv.cuh).
// Launcher: src/launch/decode_ops.cu. Test: tests/kernels/decode_ops_test.cpp.
// Work unit: swiglu_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/epilogue/swiglu_bf16.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

struct SwigluParams {
  const uint16_t* gu = nullptr;  // [rows][2I] BF16
  uint16_t* out = nullptr;       // [rows][I] BF16
  int rows = 0, I = 0;
};

inline constexpr int kSwigluThreads = 256;

// Unit `unit` of `units` (work_unit.h): a grid-stride loop, elements
// unit * 256 + i * units * 256 (+ thread), kSwigluThreads threads.
template <class Deps>
__device__ __forceinline__ void swiglu_unit(const SwigluParams& p, int unit, int units, const Deps& deps) {
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  deps.wait();     // everything it reads may come from the op before

  const size_t n = size_t(p.rows) * p.I;
  for (size_t t = unsigned(unit) * size_t(blockDim.x) + threadIdx.x; t < n;
       t += size_t(unsigned(units)) * blockDim.x) {
    const size_t r = t / p.I, j = t % p.I;
    p.out[t] = swiglu_bf16(p.gu[r * 2 * p.I + j], p.gu[r * 2 * p.I + p.I + j]);
  }
}

static __global__ void __launch_bounds__(kSwigluThreads) sm90_swiglu_kernel(const SwigluParams p) {
  swiglu_unit(p, blockIdx.x, gridDim.x, PdlDeps{});
}

}  // namespace futr::device
