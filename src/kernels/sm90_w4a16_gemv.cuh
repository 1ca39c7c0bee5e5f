// sm90_w4a16_gemv: y[M,N] = x[M,K] * W[N,K]^T for M = 1..8 query rows (the
// decode step's one-row micro-steps, and the rows of a speculative
// verification or a small batch where the inputs are fused in), W symmetric
// INT4 with FP16 group scales (G = 128 or 64), x and y BF16.
//
//   y[m,n] = sum_g s[n,g] * sum_{k in group g} x[m,k] * q[n,k]      (FP32 accumulation)
//
// Memory-bound: the weights are read exactly once (0.5 byte per weight, plus
// 2 bytes per G weights of scales); x (2MK bytes) stays in shared memory. Nothing of W is
// staged in shared memory: each lane streams its 16-byte fragments straight into
// registers through a ring of U k64 chunks x TM tiles (U*TM independent 16-byte
// loads in flight per lane) and dequantizes them into the mma.sync.m16n8k16 A
// operand (16 output channels; layout/int4_fragment.cuh). x is the B operand:
// the split's slice of each row, staged in shared memory at the start; lane g
// reads row g (rows >= M read row M-1, their results discarded), so at M = 1
// every lane reads row 0 (a broadcast) and only D column 0 (lanes 0..3) is kept.
// The MMAs, group scales and split-K store are the skinny kernel's
// (sm90_w4a16_common.cuh): a row's output has the same bits in either kernel.
//
// Work split. A CTA of 8 warps owns 8*TM tiles (warp w: tiles w, w+8, ...) and
// a K slice (split-K over gridDim.y, reduced by the last CTA of each column: no
// second pass). The loop is unrolled by U so ring slots are registers with
// constant indices, and all pointers advance by constant strides.
//
// PDL: launched as a programmatic dependent, the ring's first weight loads are
// issued before griddepcontrol.wait and x is read only after it.
//
// SwiGLU fused in (p.x_swiglu, the down projection of the decode step): x is
// the gate/up GEMM's output [M, 2K] and the slice staged in shared memory is
// bf16(silu(gate) * up), rounded as sm90_swiglu rounds it (one launch less,
// the same bits).
//
// RMSNorm fused in (p.x_norm, the QKV and gate/up projections of the decode
// step): the input is bf16(RMSNorm(v) g) with v = nx + bf16(nadd) (the
// residual add of sm90_rmsnorm, the same bits). Every CTA reads the whole rows
// (K <= cuda::kDecodeNormMaxK, checked by the launcher) and reduces each row's sum of squares in the same
// order, so all CTAs use the same factors; CTA (0, 0) stores v to nx_out. Two launches less per layer (the
// residual + RMSNorm kernels); a row's factor is summed in sm90_rmsnorm's order, so the input has the same
// bits as the separate kernel's (batch invariance: micro-steps of 1..8 rows fuse, larger ones do not).
//
// Limits: 1 <= M <= kGemvMaxRows, N % 16 == 0, K % 64 == 0, K % 128 == 0 if G == 128; 16-byte aligned
// pointers (checked by the launcher, src/launch/w4a16.cu).
// Test: tests/kernels/w4a16_test.cpp. Benchmark: bench/w4a16_bench.cpp.
// Work unit: w4a16_gemv_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include "kernels/epilogue/swiglu_bf16.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/sm90_w4a16_common.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

// The staged x rows' stride in uint4: the split's slice (nj k64 chunks of 8
// uint4) plus, for several rows, one uint4, so that the rows a warp's lanes
// read start 16 bytes apart modulo 128 (lanes of even and odd rows on
// different banks: 4 shared-memory wavefronts per 16-byte load, not 8).
__host__ __device__ constexpr int gemv_x_stride(int nj, int m) { return nj * 8 + (m > 1 ? 1 : 0); }

// The fused RMSNorm input of the gemv (p.x_norm): stages bf16(v r g) for the
// split's slice [c0 * 64, c0 * 64 + n_in) of each row m into xs + m * stride
// (BF16; stride in uint4), v = nx + bf16(nadd). All 256 threads call it; it ends with a
// barrier. Two passes over the rows (the sums of squares, then the slices
// recomputed: the same bits), so no row sits in registers (the gemv has 64 per
// thread). part: [8 M] floats of shared memory; unit (0, 0) stores v. Bar:
// the body's barrier (work_unit.h). MaxM: the rows a caller may pass (1: the
// one-row callers of the persistent executor, compiled for M = 1).
template <class Bar, int MaxM, class Unit>
__device__ __forceinline__ void gemv_stage_norm(const DecodeParams& p, uint16_t* xs, int stride, int c0,
                                                int n_in, float* part, const Unit& unit) {
  const int m = MaxM == 1 ? 1 : p.m;
  const bool store = unit.x() == 0 && unit.y() == 0;
  const int n4 = p.k / 4;
  auto bf = [](uint32_t h) { return __uint_as_float(h << 16); };
  auto value = [&](int row, int j) {  // v[row][4j .. 4j + 3]
    const float4 xv = reinterpret_cast<const float4*>(p.nx + size_t(row) * p.k)[j];
    const uint2 av = reinterpret_cast<const uint2*>(p.nadd + size_t(row) * p.k)[j];
    return make_float4(__fadd_rn(xv.x, bf(av.x & 0xffffu)), __fadd_rn(xv.y, bf(av.x >> 16)),
                       __fadd_rn(xv.z, bf(av.y & 0xffffu)), __fadd_rn(xv.w, bf(av.y >> 16)));
  };
  // NOTE: batch invariance. Each row's sum of squares in sm90_rmsnorm's order
  // (thread t: quads t, t + 256, ... with fmaf; the warp by xor-shuffle; the 8
  // warps' sums in warp order): the same factor in every CTA, for any M. The
  // rows of a group of kG are loaded together (one L2 round trip for the
  // group, not one per row: 8 rows one after another cost the step more than
  // the launches they saved).
  constexpr int kG = MaxM < 4 ? MaxM : 4;
  for (int r0 = 0; r0 < m; r0 += kG) {
    float ss[kG];
#pragma unroll
    for (int i = 0; i < kG; ++i) ss[i] = 0.f;
#pragma unroll(kG == 1 ? 4 : 1)  // at most 4 rows' loads in flight: no spills at 64 registers
    for (int j = threadIdx.x; j < n4; j += 256) {
      float4 v[kG];
#pragma unroll
      for (int i = 0; i < kG; ++i)
        if (r0 + i < m) v[i] = value(r0 + i, j);
#pragma unroll
      for (int i = 0; i < kG; ++i)
        if (r0 + i < m) {
          ss[i] = fmaf(v[i].x, v[i].x, ss[i]);
          ss[i] = fmaf(v[i].y, v[i].y, ss[i]);
          ss[i] = fmaf(v[i].z, v[i].z, ss[i]);
          ss[i] = fmaf(v[i].w, v[i].w, ss[i]);
          if (store) reinterpret_cast<float4*>(p.nx_out + size_t(r0 + i) * p.k)[j] = v[i];
        }
    }
#pragma unroll
    for (int i = 0; i < kG; ++i) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], o);
      if (r0 + i < m && threadIdx.x % 32 == 0) part[8 * (r0 + i) + threadIdx.x / 32] = ss[i];
    }
  }
  Bar::sync();
  // The slices, rounded as sm90_rmsnorm rounds them: (row, quad) items spread
  // over the threads, each with its row's factor (summed from part in warp order).
  const int j0 = c0 * layout::kChunkK / 4, nq = n_in / 4;
  for (int it = threadIdx.x; it < m * nq; it += 256) {
    const int row = it / nq, j = j0 + (it - row * nq);
    float tot = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) tot += part[8 * row + w];
    const float r = rsqrtf(tot / float(p.k) + p.neps);
    const float4 v = value(row, j);
    const uint2 g4 = reinterpret_cast<const uint2*>(p.ngain)[j];
    const float vv[4] = {v.x, v.y, v.z, v.w},
                g[4] = {bf(g4.x & 0xffffu), bf(g4.x >> 16), bf(g4.y & 0xffffu), bf(g4.y >> 16)};
    uint32_t o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const __nv_bfloat16 h = __float2bfloat16_rn(vv[e] * r * g[e]);
      o[e] = *reinterpret_cast<const uint16_t*>(&h);
    }
    *reinterpret_cast<uint2*>(xs + size_t(row) * stride * 8 + 4 * (j - j0)) =
        make_uint2(o[0] | (o[1] << 16), o[2] | (o[3] << 16));
  }
  Bar::sync();
}

// The split's scales (8 TM tiles x ngrp groups x 16 FP16) into ss, before the
// unit waits for its inputs (weights need nothing from earlier ops). Staged
// once per unit (docs/PERF.md: a 4-byte scale load per chunk in the register
// ring cost the stream ~10%).
template <int G, int TM, class Unit>
__device__ __forceinline__ void gemv_stage_scales(const DecodeParams& p, const Unit& unit, int c0, int ngrp,
                                                  uint32_t* ss, int nthreads) {
  const int ntiles = p.n / layout::kTileN;
  const int gi0 = c0 * layout::kChunkK / G;
  const uint16_t* const sc = static_cast<const uint16_t*>(p.scales);
  for (int i = threadIdx.x; i < 8 * TM * ngrp * 2; i += nthreads) {  // 16-byte pieces
    const int t = i / (ngrp * 2), r = i % (ngrp * 2);
    const int tile = unit.x() * 8 * TM + t;  // local t = 8 tm + warp (WarpTiles' order)
    if (tile < ntiles)
      reinterpret_cast<uint4*>(ss)[i] =
          ptx::ld_cached_v4(sc + (size_t(tile) * (p.k / G) + gi0) * layout::kTileN + 8 * r);
  }
}

// The split's input x[m][c0 * 64, (c0 + nj) * 64) of each row m into
// xs + m * stride (BF16; stride = gemv_x_stride(nj, M) uint4): the fused
// RMSNorm's, the fused SwiGLU's (bf16(silu(gate) * up), the rounding of
// sm90_swiglu) or x itself, read through deps (an earlier op wrote it). Called
// by the body's threads after deps.wait(); ends with a barrier. MaxM: as
// gemv_stage_norm's.
template <class Bar, int MaxM, class Unit, class Deps>
__device__ __forceinline__ void gemv_stage_x(const DecodeParams& p, const Unit& unit, int c0, int nj,
                                             uint4* gemv_xs, float* part, const Deps& deps) {
  const int m = MaxM == 1 ? 1 : p.m;
  const int stride = gemv_x_stride(nj, m), per_row = nj * (layout::kChunkK / 8);
  if (p.x_norm) {
    gemv_stage_norm<Bar, MaxM>(p, reinterpret_cast<uint16_t*>(gemv_xs), stride, c0, nj * layout::kChunkK,
                               part, unit);
    return;
  }
  for (int i = threadIdx.x; i < m * per_row; i += Bar::threads()) {
    const int row = i / per_row, q = i - row * per_row;
    uint4 o;
    if (p.x_swiglu) {  // row of [M, 2K]: gate, then up
      const uint4* const gg =
          reinterpret_cast<const uint4*>(p.x + size_t(row) * 2 * p.k + size_t(c0) * layout::kChunkK);
      const uint4 g4 = deps.act_v4(gg + q), u4 = deps.act_v4(gg + p.k / 8 + q);
      const uint32_t* g = &g4.x;
      const uint32_t* u = &u4.x;
      uint32_t* ow = &o.x;
#pragma unroll
      for (int w = 0; w < 4; ++w)
        ow[w] = uint32_t(swiglu_bf16(uint16_t(g[w]), uint16_t(u[w]))) |
                (uint32_t(swiglu_bf16(uint16_t(g[w] >> 16), uint16_t(u[w] >> 16))) << 16);
    } else {
      o = deps.act_v4(reinterpret_cast<const uint4*>(p.x + size_t(row) * p.k + size_t(c0) * layout::kChunkK) +
                      q);
    }
    gemv_xs[row * stride + q] = o;
  }
  Bar::sync();
}

// One unit (work_unit.h): column group unit.x() (8 TM tiles), K split
// unit.y(); 256 threads; xs: the dynamic shared memory (the launcher's bytes:
// the split's x slices and its tiles' scales). MaxM: the rows it may be given
// (1 for the persistent executor's one-row ops: the code of M = 1 only).
template <int G, int TM, int U, int MaxM = kGemvMaxRows, class Unit, class Deps>
__device__ __forceinline__ void w4a16_gemv_unit(const DecodeParams& p, const Unit& unit, int /*units*/,
                                                const W4a16Smem& sm, uint4* gemv_xs, const Deps& deps) {
  static_assert(MaxM >= 1 && MaxM <= kGemvMaxRows, "the gemv's rows: 1..kGemvMaxRows");
  static_assert(TM == 1 || TM == 2 || TM == 4, "TM weight tiles of 16 channels per warp: 1, 2 or 4");
  static_assert(U >= 2 && U <= 8 && U % 2 == 0, "ring depth: 2..8 chunks, even (whole 128-blocks)");
  using WF = Int4Format<G>;

  // ---- indices ------------------------------------------------------------
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  deps.release();  // the next op may start (launch executor: PDL, see ptx/pdl.cuh)
  WarpTiles<WF, TM> wt(p, warp, lane, unit.x(), unit.y());
  const int c0 = wt.c0, nj = wt.nj;
  auto& wnext = wt.wnext;
  const auto& wstride = wt.wstride;
  // This split's activations, staged in shared memory (dynamic: M rows of
  // kb_per_split x 256 bytes): lane g reads x[min(g, M-1)][c0*64 + 16c + ...]
  // (at M = 1 the same 16 activations for every g: a broadcast). Read from
  // global memory, the first warp of a CTA to touch each line waited on L2
  // once per chunk (docs/PERF.md: with x always in L1 the gemv's arithmetic
  // cost the floor 6%).
  const int m = MaxM == 1 ? 1 : p.m;
  const int stride = gemv_x_stride(nj, m);
  const uint4* const xrow = gemv_xs + min(g, m - 1) * stride + 2 * c;

  float acc[TM][1][4], blk[TM][1][4];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[tm][0][i] = blk[tm][0][i] = 0.f;

  // ---- shared memory: [x slices: M x stride uint4][scales: 8*TM tiles][ngrp][16 FP16] --
  const int ngrp = (nj * layout::kChunkK + G - 1) / G;
  uint32_t* const ss = reinterpret_cast<uint32_t*>(gemv_xs + m * stride);
  gemv_stage_scales<G, TM>(p, unit, c0, ngrp, ss, blockDim.x);
  const uint32_t* const srow = ss + warp * ngrp * 8 + g;  // this lane's scales: tile 8 tm + warp, channel g

  // ---- main loop: batches of U chunks x TM tiles in registers -------------------
  // The U loads of a batch are issued together and consumed in order; the next
  // batch's loads are issued after the last use (a ring refilled one chunk at a
  // time streamed ~9% slower in the probe, dev/bench/w4a16_probe.cuh).
  uint32_t wr[U][TM][4];
  auto fill = [&](int u) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) {
      WF::load(wnext[tm], wr[u][tm]);
      wnext[tm] += wstride[tm];
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nj) fill(u);
  // PDL: the loads above already stream weights; x (and y, ws) belong to the
  // previous op until the wait.
  deps.wait();
  gemv_stage_x<CtaBarrier, MaxM>(p, unit, c0, nj, gemv_xs, sm.part, deps);
  // x is read one chunk ahead so its latency overlaps the MMAs of the chunk before.
  uint4 xn0 = xrow[0], xn1 = xrow[1];
  int xoff = 0;
  for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u < nj) {
        uint4 xq[1][2] = {{xn0, xn1}};
        xoff += layout::kChunkK / 8;
        if (j0 + u + 1 < nj) {
          xn0 = xrow[xoff];
          xn1 = xrow[xoff + 1];
        }
        chunk_mma<WF, 1, TM>(blk, acc, wr[u], xq, WF::group_start(u));
        if (WF::group_end(u) || j0 + u + 1 == nj) {
          const int gi = (j0 + u) * layout::kChunkK / G;
          uint32_t sv[TM];
#pragma unroll
          for (int tm = 0; tm < TM; ++tm) sv[tm] = srow[(tm * 8 * ngrp + gi) * 8];
          apply_scales<1, TM>(acc, blk, sv);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (j0 + u + U < nj) fill(u);
  }

  store_output<WF, 1, TM>(p, acc, wt.tile, wt.tok, g, c, unit, *sm.last);
}

template <int G, int TM, int U>
__global__ void __launch_bounds__(256, TM == 1 ? 4 : 2) sm90_w4a16_gemv_kernel(const DecodeParams p) {
  extern __shared__ __align__(128) uint4 gemv_xs[];  // 128-byte aligned as the skinny kernel's rings
  __shared__ float part[8 * kGemvMaxRows];
  __shared__ uint32_t s_last;
  w4a16_gemv_unit<G, TM, U>(p, BlockUnit{}, gridDim.x * gridDim.y, W4a16Smem{part, &s_last}, gemv_xs,
                            PdlDeps{});
}

}  // namespace futr::device
