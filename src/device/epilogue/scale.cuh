// Scaling ops (fragment pass): the dequantization of the FP8 product and the
// folded-RMSNorm row factor.
//
//   ColScale:      c[m,n] *= a_scale * b_scale[n]      (per-tensor A, per-channel B)
//   RowRmsFactor:  c[m,n] *= 1 / sqrt(sumsq[m] / hidden + eps)
//
// RowRmsFactor is RMSNorm applied after the projection: with the gain g folded
// into the weights offline (B' = B diag(g)), RMSNorm(x) B^T = r(x) * (x B'^T)
// with r(x) = 1/sqrt(mean(x^2) + eps) a per-row scalar, so the GEMM runs on the
// un-normalized x and the epilogue multiplies each row by r. The sums of
// squares come from the previous layer's ResidualSumSq epilogue (sum over the
// hidden dimension of the BF16 values stored there).
// CPU references: src/cpu/ref/fp8_gemm_ref.h (col_scale, row_rms_factor).
#pragma once

#include "device/epilogue/epilogue.cuh"

namespace futr::device::epi {

struct ColScale : OpBase {
  struct Params {
    const float* a_scale;  // [1] per-tensor dequantization scale of A (nullptr: 1)
    const float* b_scale;  // [N] per-output-channel dequantization scale of B (nullptr: 1)
  };
  template <int NREG>
  __device__ __forceinline__ static void fragment(const Params& p, const TileCtx& t,
                                                  const FragCoord& f, float (&acc)[NREG],
                                                  EpiState&) {
    const float sa = p.a_scale ? __ldg(p.a_scale) : 1.0f;
#pragma unroll
    for (int j = 0; j < NREG / 4; ++j) {
      const int col = t.n0 + 8 * j + f.col0;
      float2 sb = make_float2(1.0f, 1.0f);
      if (p.b_scale && col < t.N) sb = __ldg(reinterpret_cast<const float2*>(p.b_scale + col));
      acc[4 * j + 0] *= sa * sb.x;
      acc[4 * j + 1] *= sa * sb.y;
      acc[4 * j + 2] *= sa * sb.x;
      acc[4 * j + 3] *= sa * sb.y;
    }
  }
};

struct RowRmsFactor : OpBase {
  struct Params {
    const float* rms_sumsq;  // [M] sum over the hidden dim of x^2 (from ResidualSumSq)
    float rms_inv_hidden;    // 1 / hidden (the mean's divisor)
    float rms_eps;           // RMSNorm epsilon
  };
  template <int NREG>
  __device__ __forceinline__ static void fragment(const Params& p, const TileCtx& t,
                                                  const FragCoord&, float (&acc)[NREG],
                                                  EpiState& st) {
    float r[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      r[h] = st.frow[h] < t.M ? rsqrtf(__ldg(p.rms_sumsq + st.frow[h]) * p.rms_inv_hidden + p.rms_eps)
                              : 0.0f;
#pragma unroll
    for (int i = 0; i < NREG; ++i) acc[i] *= r[(i >> 1) & 1];
  }
};

}  // namespace futr::device::epi
