// sm90_rmsnorm: the residual stream's step between two GEMMs of the decode
// path, one CTA per row (cpu::rmsnorm and cpu::add_inplace are its reference):
//
//   x   = E[token]            (gather mode: the embedding row, BF16 -> FP32)
//   x  += float(y)            (add mode: a GEMM's BF16 output)
//   out = bf16(x * r * g),    r = 1 / sqrt(mean_j(x_j^2) + eps)
//
// x is the FP32 residual [rows][H], kept in place; g the BF16 gain; out the BF16
// input of the next GEMM. The row's sum of squares is a block reduction in FP32
// in a fixed order (below). Limits: H <= 8192, H % 4 == 0 (x staged per thread
// in registers: 8 quads at 256 threads).
// Launcher: src/launch/decode_ops.cu. Test: tests/kernels/decode_ops_test.cpp.
// Work unit: rmsnorm_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include "kernels/ptx/pdl.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

struct RmsNormParams {
  float* x = nullptr;             // [rows][H] FP32 residual (read and written)
  const uint16_t* add = nullptr;  // add mode: [rows][ld_add] BF16, or null
  int64_t ld_add = 0;
  const int* tokens = nullptr;     // gather mode: [rows] ids, or null
  const uint16_t* embd = nullptr;  // gather mode: [vocab][H] BF16
  const uint16_t* gain = nullptr;  // [H] BF16
  uint16_t* out = nullptr;         // [rows][H] BF16
  int H = 0;
  float eps = 1e-5f;
};

inline constexpr int kRmsThreads = 256;
inline constexpr int kRmsQuads = 8;                     // quads of 4 values per thread
inline constexpr int kRmsMaxPerThread = 4 * kRmsQuads;  // H <= 8192
// NOTE: batch invariance. Thread t owns the quads j = t, t + 256, ... (values
// 4j .. 4j + 3) and sums their squares in that order with fmaf, then the warp
// reduces by xor-shuffle and the 8 warp sums are added in warp order: exactly
// the order of the W4A16 gemv's fused RMSNorm input (sm90_w4a16_gemv.cuh,
// gemv_stage_norm), so a row's factor r has the same bits whether the decode
// step ran it here (micro-steps of several rows) or inside the gemv (one row).
// H % 4 == 0 (checked by the launcher).

// Shared memory of one unit: the warps' partial sums of squares.
struct RmsNormSmem {
  float part[kRmsThreads / 32];
};

// One row (work_unit.h): unit = the row, kRmsThreads threads.
template <class Deps>
__device__ __forceinline__ void rmsnorm_unit(const RmsNormParams& p, int unit, int /*units*/, RmsNormSmem& sm,
                                             const Deps& deps) {
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  const int row = unit, tid = threadIdx.x;
  const int n4 = p.H / 4;
  auto bf = [](uint16_t h) { return __uint_as_float(uint32_t(h) << 16); };
  // The gain is a weight (no kernel writes it): loaded before griddepcontrol.wait.
  float g[kRmsQuads][4];
#pragma unroll
  for (int i = 0; i < kRmsQuads; ++i) {
    const int j = tid + i * kRmsThreads;
#pragma unroll
    for (int e = 0; e < 4; ++e) g[i][e] = j < n4 ? bf(p.gain[4 * j + e]) : 0.f;
  }
  deps.wait();  // x, add and the tokens may come from the op before

  // Every load of the row is issued before the first store: a load after a
  // store to x could alias it, so interleaving them serialized the row into
  // one memory round trip per element (~10 us at H = 4096, docs/PERF.md).
  float* x = p.x + size_t(row) * p.H;
  const uint16_t* src = p.tokens ? p.embd + size_t(p.tokens[row]) * p.H : nullptr;
  const uint16_t* add = p.add ? p.add + size_t(row) * p.ld_add : nullptr;
  float v[kRmsQuads][4];
#pragma unroll
  for (int i = 0; i < kRmsQuads; ++i) {
    const int j = tid + i * kRmsThreads;
    if (j < n4) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float a = src ? bf(src[4 * j + e]) : x[4 * j + e];
        if (add) a = __fadd_rn(a, bf(add[4 * j + e]));
        v[i][e] = a;
      }
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kRmsQuads; ++i) {
    const int j = tid + i * kRmsThreads;
    if (j < n4) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[4 * j + e] = v[i][e];
        ss = fmaf(v[i][e], v[i][e], ss);
      }
    }
  }
  // ---- block sum of squares (the gemv's order, above) ---------------------------
  float* const part = sm.part;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (tid % 32 == 0) part[tid / 32] = ss;
  __syncthreads();
  float tot = 0.f;
#pragma unroll
  for (int w = 0; w < kRmsThreads / 32; ++w) tot += part[w];
  const float r = rsqrtf(tot / float(p.H) + p.eps);
  // ---- normalized BF16 output ------------------------------------------------
#pragma unroll
  for (int i = 0; i < kRmsQuads; ++i) {
    const int j = tid + i * kRmsThreads;
    if (j < n4) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const __nv_bfloat16 o = __float2bfloat16_rn(v[i][e] * r * g[i][e]);
        p.out[size_t(row) * p.H + 4 * j + e] = *reinterpret_cast<const uint16_t*>(&o);
      }
    }
  }
}

static __global__ void __launch_bounds__(kRmsThreads) sm90_rmsnorm_kernel(const RmsNormParams p) {
  __shared__ RmsNormSmem sm;
  rmsnorm_unit(p, blockIdx.x, gridDim.x, sm, PdlDeps{});
}

}  // namespace futr::device
