// sm90_w4a16_gemv: y[1,N] = x[1,K] * W[N,K]^T for ONE query row (batch-1 decode),
// W symmetric INT4 with FP16 group scales (G = 128 or 64), x and y BF16.
//
//   y[n] = sum_g s[n,g] * sum_{k in group g} x[k] * q[n,k]      (FP32 accumulation)
//
// Memory-bound: the weights are read exactly once (0.5 byte per weight, plus
// 2 bytes per G weights of scales); x (2K bytes) stays in L1. Nothing of W is
// staged in shared memory: each lane streams its 16-byte fragments straight into
// registers through a ring of U k64 chunks x TM tiles (U*TM independent 16-byte
// loads in flight per lane) and dequantizes them into the mma.sync.m16n8k16 A
// operand (16 output channels; layout/int4_fragment.cuh). x is the B operand:
// every lane loads row 0 (a broadcast), so only D column 0 (lanes 0..3) is kept.
// (policies, chunk MMAs and the split-K epilogue: sm90_w4a16_common.cuh)
//
// Work split. A CTA of 8 warps owns 8*TM tiles (warp w: tiles w, w+8, ...) and
// a K slice (split-K over gridDim.y, reduced by the last CTA of each column: no
// second pass). The loop is unrolled by U so ring slots are registers with
// constant indices, and all pointers advance by constant strides.
//
// PDL: launched as a programmatic dependent, the ring's first weight loads are
// issued before griddepcontrol.wait and x is read only after it.
//
// Limits: N % 16 == 0, K % 64 == 0, K % 128 == 0 if G == 128; 16-byte aligned
// pointers (checked by the launcher, src/cuda/w4a16.cu).
// Test: tests/device/w4a16_test.cpp. Benchmark: bench/w4a16_bench.cpp.
#pragma once

#include "device/kernels/sm90_w4a16_common.cuh"
#include "device/ptx/pdl.cuh"

namespace futr::device {

template <int G, int TM, int U>
__global__ void __launch_bounds__(256, TM == 1 ? 4 : 2) sm90_w4a16_gemv_kernel(const DecodeParams p) {
  static_assert(TM == 1 || TM == 2 || TM == 4, "TM weight tiles of 16 channels per warp: 1, 2 or 4");
  static_assert(U >= 2 && U <= 8 && U % 2 == 0, "ring depth: 2..8 chunks, even (whole 128-blocks)");
  using WF = Int4Format<G>;

  // ---- indices ------------------------------------------------------------
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  ptx::griddep_launch_dependents();  // PDL: the next kernel may launch (see ptx/pdl.cuh)
  WarpTiles<WF, TM> wt(p, warp, lane);
  const int c0 = wt.c0, nj = wt.nj;
  auto& wnext = wt.wnext;
  auto& snext = wt.snext;
  const auto& wstride = wt.wstride;
  // x[c0*64 + 16c + ...]: the same 16 activations for every g (a broadcast).
  const uint4* const xrow = reinterpret_cast<const uint4*>(p.x + size_t(c0) * layout::kChunkK + 16 * c);

  float acc[TM][1][4], blk[TM][1][4];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[tm][0][i] = blk[tm][0][i] = 0.f;

  // ---- main loop: a register ring of U chunks x TM tiles ---------------------
  uint32_t wr[U][TM][4];
  uint32_t sr[U][TM];
  auto fill = [&](int u) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) {
      WF::load(wnext[tm], wr[u][tm]);
      sr[u][tm] = WF::load_scale(snext[tm]);
      wnext[tm] += wstride[tm];
      snext[tm] += WF::scale_step(u);
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nj) fill(u);
  // PDL: the ring above already streams weights; x (and y, ws) belong to the
  // previous kernel until griddepcontrol.wait.
  ptx::griddep_wait();
  // x is loaded one chunk ahead so its latency overlaps the MMAs of the chunk before.
  uint4 xn0 = ptx::ld_cached_v4(xrow), xn1 = ptx::ld_cached_v4(xrow + 1);
  int xoff = 0;
  for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u < nj) {
        uint4 xq[1][2] = {{xn0, xn1}};
        xoff += layout::kChunkK / 8;
        if (j0 + u + 1 < nj) {
          xn0 = ptx::ld_cached_v4(xrow + xoff);
          xn1 = ptx::ld_cached_v4(xrow + xoff + 1);
        }
        chunk_mma<WF, 1, TM>(blk, acc, wr[u], xq, WF::group_start(u));
        if (WF::group_end(u) || j0 + u + 1 == nj) apply_scales<1, TM>(acc, blk, sr[u]);
        // Refill after use: the slot's registers are free; U-1 chunks stay in flight.
        if (j0 + u + U < nj) fill(u);
      }
    }
  }

  store_output<WF, 1, TM>(p, acc, wt.tile, wt.tok, g, c);
}

}  // namespace futr::device
