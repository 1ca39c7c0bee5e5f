// BF16 output ops (piece pass): residual add, the BF16 store, and the row sum
// of squares of what was stored.
//
//   AddResidual:  v += residual[m, n]                      (BF16 residual stream)
//   StoreBf16:    out[m, n] = bf16(v); v = bf16(v)          (a sink)
//   RowSumSq:     sumsq[m] += sum_n v^2                      (after StoreBf16: of the stored values)
//
// out may alias residual (in-place hidden += C): each element is read and
// written by the same thread. RowSumSq accumulates with atomicAdd across the
// N tiles of a row: the launcher zeroes sumsq first.
// CPU references: src/reference/fp8_gemm_ref.h.
#pragma once

#include "kernels/epilogue/epilogue.cuh"
#include "kernels/ptx/tma.cuh"

namespace futr::device::epi {

struct AddResidual : OpBase {
  struct Params {
    const uint16_t* residual;  // [M, ld_res] BF16 (8-byte aligned rows)
    int ld_res;                // residual row stride, elements
  };
  // Before the main loop: L2 prefetch of this warpgroup's 64 residual row
  // segments (bn * 2 bytes each, 128-byte lines spread over the 128 threads),
  // so the epilogue's loads hit L2 and the HBM reads spread over the main loop
  // instead of arriving in one burst from every SM at the same time.
  template <class P>
  __device__ __forceinline__ static void prefetch(const P& pp, const TileCtx& t, EpiState&) {
    const Params& p = pp;
    const int lines_per_row = t.bn / 64;  // 64 BF16 per 128-byte line
    for (int l = t.tid; l < 64 * lines_per_row; l += 128) {
      const int row = t.wg_row0 + l / lines_per_row, col = t.n0 + (l % lines_per_row) * 64;
      if (row < t.M && col < t.N) ptx::prefetch_global_l2(p.residual + size_t(row) * p.ld_res + col);
    }
  }
  // Register prefetch two chunks ahead (ring st.res[c % 3]): each chunk's
  // loads are in flight while the two chunks before it are processed.
  __device__ __forceinline__ static void load_chunk(const Params& p, const TileCtx& t, int c, uint2 (&dst)[4],
                                                    const EpiState& st) {
    const int col = t.n0 + c * 32 + (t.tid % 8) * 4;
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      const int row = st.prow[it];
      dst[it] = (row < t.M && col < t.N && c * 32 < t.bn)
                    ? __ldg(reinterpret_cast<const uint2*>(p.residual + size_t(row) * p.ld_res + col))
                    : make_uint2(0, 0);
    }
  }
  template <class P>
  __device__ __forceinline__ static void chunk_begin(const P& pp, const TileCtx& t, int c, EpiState& st) {
    const Params& p = pp;
    if (c == 0) {
      load_chunk(p, t, 0, st.res[0], st);
      load_chunk(p, t, 1, st.res[1], st);
    }
    load_chunk(p, t, c + 2, st.res[(c + 2) % 3], st);
  }
  __device__ __forceinline__ static void piece(const Params&, const TileCtx&, int c, int it, int, int,
                                               float (&v)[4], EpiState& st) {
    const uint2 r = st.res[c % 3][it];
    v[0] += bf16_lo(r.x);
    v[1] += bf16_hi(r.x);
    v[2] += bf16_lo(r.y);
    v[3] += bf16_hi(r.y);
  }
};

struct StoreBf16 : OpBase {
  struct Params {
    uint16_t* out;  // [M, ld_out] BF16
    int ld_out;     // output row stride, elements (multiple of 4)
  };
  __device__ __forceinline__ static void piece(const Params& p, const TileCtx&, int, int, int row, int col,
                                               float (&v)[4], EpiState&) {
    uint2 o;
    o.x = pack_bf16x2(v[0], v[1]);
    o.y = pack_bf16x2(v[2], v[3]);
    *reinterpret_cast<uint2*>(p.out + size_t(row) * p.ld_out + col) = o;
    v[0] = bf16_lo(o.x);
    v[1] = bf16_hi(o.x);
    v[2] = bf16_lo(o.y);
    v[3] = bf16_hi(o.y);
  }
};

struct RowSumSq : OpBase {
  struct Params {
    float* row_sumsq;  // [M] accumulated sum of squares of the stored row (zeroed by the launcher)
  };
  template <class P>
  __device__ __forceinline__ static void tile_begin(const P&, const TileCtx&, EpiState& st) {
#pragma unroll
    for (int it = 0; it < 4; ++it) st.row_acc[it] = 0.0f;
  }
  __device__ __forceinline__ static void piece(const Params&, const TileCtx&, int, int it, int, int,
                                               float (&v)[4], EpiState& st) {
    st.row_acc[it] += v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
  }
  // The 8 lanes that share a row (lanes 8g..8g+7) reduce; one atomic per row per tile.
  __device__ __forceinline__ static void tile_end(const Params& p, const TileCtx& t, EpiState& st) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      float s = st.row_acc[it];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      if ((lane & 7) == 0 && st.prow[it] < t.M) atomicAdd(p.row_sumsq + st.prow[it], s);
    }
  }
};

}  // namespace futr::device::epi
