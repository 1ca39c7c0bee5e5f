// SwiGLU with delayed-scaling FP8 output (piece pass, a sink).
//
// Weights interleaved by column: B row 2i is the gate row i, B row 2i+1 the up
// row i (docs/LAYOUTS.md "FP8 GEMM operands"), so C columns (2i, 2i+1) hold
// the pair (g_i, u_i) and every piece of 4 columns holds two complete pairs:
//
//   y[m, i]   = silu(g) * u = g / (1 + exp(-g)) * u               (FP32)
//   out[m, i] = e4m3_satfinite(y / s)                               (RNE, clamp to +-448)
//   amax_out  = max(amax_out, max |y|)                              (this call's amax)
//   saturation_out += #{ |y / s| > 448 }                            (clamped outputs)
//
// Delayed scaling, device interface (the host-side state machine is separate):
//   scale_in       [1] float, the dequantization scale s of THIS call, chosen by
//                  the host from the amax history of PREVIOUS calls (e.g.
//                  s = amax_prev / 448). It must be finite and > 0. The output
//                  dequantizes as y ~= out * s (s is the next GEMM's A scale).
//   amax_out       [1] float, max-reduced (atomicMax on the bit pattern of a
//                  non-negative float); the caller sets it to 0 before the call
//                  (or keeps accumulating across calls on purpose).
//   saturation_out [1] uint32, added to; the caller zeroes it. Nonzero means
//                  s was too small for this call's data (the state machine
//                  should raise s and may recompute).
// The kernel never reads amax_out: a call's scale depends only on scale_in,
// so results are deterministic given scale_in, and this call's amax affects
// only later calls.
// CPU reference: src/reference/fp8_gemm_ref.h (swiglu_fp8).
#pragma once

#include <cuda_fp8.h>

#include "kernels/epilogue/epilogue.cuh"

namespace futr::device::epi {

struct SwiGluFp8 : OpBase {
  struct Params {
    uint8_t* out_fp8;          // [M, ld_fp8] E4M3, ld_fp8 >= N / 2 (multiple of 2)
    int ld_fp8;                // output row stride, bytes
    const float* scale_in;     // [1] dequantization scale s of this call (from previous amax)
    float* amax_out;           // [1] max |y| of this call (max-reduced, caller zeroes)
    uint32_t* saturation_out;  // [1] count of |y / s| > 448 (added to, caller zeroes)
  };
  template <class P>
  __device__ __forceinline__ static void prefetch(const P& p, const TileCtx&, EpiState& st) {
    st.qscale = __ldg(static_cast<const Params&>(p).scale_in);  // inverted in tile_begin
  }
  template <class P>
  __device__ __forceinline__ static void tile_begin(const P&, const TileCtx&, EpiState& st) {
    st.qscale = 1.0f / st.qscale;
  }
  // silu(g) = g / (1 + e^-g) with the SFU exponential and fast division (2 ulp;
  // for g < -87 e^-g overflows and the quotient is -0, silu's limit).
  __device__ __forceinline__ static float silu(float g) { return __fdividef(g, 1.0f + __expf(-g)); }

  __device__ __forceinline__ static void piece(const Params& p, const TileCtx&, int, int, int row, int col,
                                               float (&v)[4], EpiState& st) {
    const float y0 = silu(v[0]) * v[1];
    const float y1 = silu(v[2]) * v[3];
    st.amax = fmaxf(st.amax, fmaxf(fabsf(y0), fabsf(y1)));
    const float q0 = y0 * st.qscale, q1 = y1 * st.qscale;
    st.sat += uint32_t(fabsf(q0) > 448.0f) + uint32_t(fabsf(q1) > 448.0f);
    const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(make_float2(q0, q1), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<__nv_fp8x2_storage_t*>(p.out_fp8 + size_t(row) * p.ld_fp8 + col / 2) = q;
  }
  // Warp-reduce, then one atomic per warp.
  __device__ __forceinline__ static void finish(const Params& p, EpiState& st) {
    float a = st.amax;
    uint32_t s = st.sat;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
      s += __shfl_xor_sync(0xffffffffu, s, o);
    }
    if (threadIdx.x % 32 == 0) {
      atomicMax(reinterpret_cast<unsigned int*>(p.amax_out), __float_as_uint(a));
      if (s) atomicAdd(p.saturation_out, s);
    }
  }
};

}  // namespace futr::device::epi
