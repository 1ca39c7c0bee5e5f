// sm90_rope: rotary position embedding of the query and key heads of the QKV
// GEMM's BF16 output, in place (cpu::apply_rope is the reference): within a
// head of dimension D, dim i < D/2 pairs with i + D/2 and rotates by the
// tabulated angle of the row's position,
//
//   x'_i       = x_i cos - x_{i+D/2} sin
//   x'_{i+D/2} = x_{i+D/2} cos + x_i sin        (FP32, each op rounded: __f*_rn)
//
// then rounds to BF16 (what the K cache and the attention's query hold). The
// cos/sin tables are model/rope.h's make_rope_table, FP32 [max_pos][D/2]. The first
// `heads` head vectors of each row are rotated (q heads, then k heads).
// One CTA per row. Launcher: src/launch/decode_ops.cu. Test: tests/kernels/decode_ops_test.cpp.
// Work unit: rope_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include "kernels/ptx/pdl.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

struct RopeParams {
  uint16_t* x = nullptr;  // [rows][ld] BF16
  int64_t ld = 0;
  const int* pos = nullptr;    // [rows] positions
  const float* cos = nullptr;  // [max_pos][D/2]
  const float* sin = nullptr;
  int heads = 0, D = 0;
};

inline constexpr int kRopeThreads = 256;

// One row (work_unit.h): unit = the row, kRopeThreads threads, no shared memory.
template <class Deps>
__device__ __forceinline__ void rope_unit(const RopeParams& p, int unit, int /*units*/, const Deps& deps) {
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  deps.wait();     // everything it reads may come from the op before

  const int row = unit, half = p.D / 2;
  uint16_t* x = p.x + size_t(row) * size_t(p.ld);
  const float* c = p.cos + size_t(p.pos[row]) * half;
  const float* s = p.sin + size_t(p.pos[row]) * half;
  for (int t = threadIdx.x; t < p.heads * half; t += blockDim.x) {
    const int h = t / half, i = t % half;
    uint16_t* v = x + h * p.D;
    const float a = __uint_as_float(uint32_t(v[i]) << 16), b = __uint_as_float(uint32_t(v[i + half]) << 16);
    const float lo = __fsub_rn(__fmul_rn(a, c[i]), __fmul_rn(b, s[i]));
    const float hi = __fadd_rn(__fmul_rn(b, c[i]), __fmul_rn(a, s[i]));
    const __nv_bfloat16 l = __float2bfloat16_rn(lo), u = __float2bfloat16_rn(hi);
    v[i] = *reinterpret_cast<const uint16_t*>(&l);
    v[i + half] = *reinterpret_cast<const uint16_t*>(&u);
  }
}

__global__ void __launch_bounds__(kRopeThreads) sm90_rope_kernel(const RopeParams p) {
  rope_unit(p, blockIdx.x, gridDim.x, PdlDeps{});
}

}  // namespace futr::device
