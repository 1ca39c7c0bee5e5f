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
// CPU references: src/reference/fp8_gemm_ref.h (col_scale, row_rms_factor).
#pragma once

#include "kernels/epilogue/epilogue.cuh"
#include "kernels/ptx/fence.cuh"

namespace futr::device::epi {

// Column scales go through a per-warpgroup shared vector: each thread loads 2
// of the tile's BN scales before the main loop (latency hidden by the MMAs),
// publishes them after it, and the fragment pass reads them from shared memory.
// NOTE: loading them in the fragment pass straight from global memory made the
// compiler sink the loads next to their uses in the chunk loop: one L2 round
// trip per chunk, ~4 us per tile on the H200 (v1 in docs/PERF.md).
struct ColScale : OpBase {
  struct Params {
    const float* a_scale;  // [1] per-tensor dequantization scale of A (nullptr: 1)
    const float* b_scale;  // [N] per-output-channel dequantization scale of B (nullptr: 1)
  };
  template <class P>
  __device__ __forceinline__ static void prefetch(const P& pp, const TileCtx& t, EpiState& st) {
    const Params& p = pp;
    st.a_scale = p.a_scale ? __ldg(p.a_scale) : 1.0f;
    const int col = t.n0 + 2 * t.tid;
    float2 sb = make_float2(1.0f, 1.0f);
    if (p.b_scale && 2 * t.tid < t.bn && col < t.N)
      sb = __ldg(reinterpret_cast<const float2*>(p.b_scale + col));
    st.col_pre[0] = sb.x;
    st.col_pre[1] = sb.y;
  }
  template <int NREG>
  __device__ __forceinline__ static void fragment(const Params&, const TileCtx& t, const FragCoord& f,
                                                  float (&acc)[NREG], EpiState& st) {
    // The previous tile's reads of colvec are separated from this write by the
    // chunk loop's barriers.
    if (2 * t.tid < t.bn)
      *reinterpret_cast<float2*>(t.colvec + 2 * t.tid) = make_float2(st.col_pre[0], st.col_pre[1]);
    ptx::bar_sync(t.bar_id, 128);
#pragma unroll
    for (int j = 0; j < NREG / 4; ++j) {
      const float2 sb = *reinterpret_cast<const float2*>(t.colvec + 8 * j + f.col0);
      acc[4 * j + 0] *= st.a_scale * sb.x;
      acc[4 * j + 1] *= st.a_scale * sb.y;
      acc[4 * j + 2] *= st.a_scale * sb.x;
      acc[4 * j + 3] *= st.a_scale * sb.y;
    }
  }
};

struct RowRmsFactor : OpBase {
  struct Params {
    const float* rms_sumsq;  // [M] sum over the hidden dim of x^2 (from ResidualSumSq)
    float rms_inv_hidden;    // 1 / hidden (the mean's divisor)
    float rms_eps;           // RMSNorm epsilon
  };
  template <class P>
  __device__ __forceinline__ static void prefetch(const P& pp, const TileCtx& t, EpiState& st) {
    const Params& p = pp;
#pragma unroll
    for (int h = 0; h < 2; ++h) st.row_pre[h] = st.frow[h] < t.M ? __ldg(p.rms_sumsq + st.frow[h]) : 0.0f;
  }
  template <int NREG>
  __device__ __forceinline__ static void fragment(const Params& p, const TileCtx&, const FragCoord&,
                                                  float (&acc)[NREG], EpiState& st) {
    float r[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) r[h] = rsqrtf(st.row_pre[h] * p.rms_inv_hidden + p.rms_eps);
#pragma unroll
    for (int i = 0; i < NREG; ++i) acc[i] *= r[(i >> 1) & 1];
  }
};

}  // namespace futr::device::epi
