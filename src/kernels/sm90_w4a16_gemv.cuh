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
// every lane reads row 0 (a broadcast) from the split's slice of x, staged in
// shared memory at the start, so only D column 0 (lanes 0..3) is kept.
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
// SwiGLU fused in (p.x_swiglu, the down projection of the decode step): x is
// the gate/up GEMM's output [1, 2K] and the slice staged in shared memory is
// bf16(silu(gate) * up), rounded as sm90_swiglu rounds it (one launch less,
// the same bits).
//
// RMSNorm fused in (p.x_norm, the QKV and gate/up projections of the decode
// step at M = 1): the input is bf16(RMSNorm(v) g) with v = nx + bf16(nadd) (the
// residual add of sm90_rmsnorm, the same bits). Every CTA reads the whole row
// (K <= cuda::kDecodeNormMaxK, checked by the launcher) and reduces its sum of squares in the same order, so
// all CTAs use the same factor; CTA (0, 0) stores v to nx_out. Two launches less per layer (the residual +
// RMSNorm kernels); the factor is summed in sm90_rmsnorm's order, so the input has the same bits as the
// separate kernel's (batch invariance: one-row micro-steps fuse, larger ones do not).
//
// Limits: N % 16 == 0, K % 64 == 0, K % 128 == 0 if G == 128; 16-byte aligned
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

// The fused RMSNorm input of the gemv (p.x_norm): stages bf16(v r g) for the
// split's slice [c0 * 64, c0 * 64 + n_in) into xs (BF16), v = nx + bf16(nadd).
// All 256 threads call it; it ends with a barrier. Two passes over the row
// (the sum of squares, then the slice recomputed: the same bits), so the row
// never sits in registers (the gemv has 64 per thread). part: [8] floats of
// shared memory; unit (0, 0) stores v. Bar: the body's barrier (work_unit.h).
template <class Bar, class Unit>
__device__ __forceinline__ void gemv_stage_norm(const DecodeParams& p, uint16_t* xs, int c0, int n_in,
                                                float* part, const Unit& unit) {
  const float4* __restrict__ x4 = reinterpret_cast<const float4*>(p.nx);
  const uint2* __restrict__ a4 = reinterpret_cast<const uint2*>(p.nadd);
  float4* __restrict__ out4 = unit.x() == 0 && unit.y() == 0 ? reinterpret_cast<float4*>(p.nx_out) : nullptr;
  const int n4 = p.k / 4;
  auto bf = [](uint32_t h) { return __uint_as_float(h << 16); };
  auto value = [&](int j) {  // v[4j .. 4j + 3]
    const float4 xv = x4[j];
    const uint2 av = a4[j];
    return make_float4(__fadd_rn(xv.x, bf(av.x & 0xffffu)), __fadd_rn(xv.y, bf(av.x >> 16)),
                       __fadd_rn(xv.z, bf(av.y & 0xffffu)), __fadd_rn(xv.w, bf(av.y >> 16)));
  };
  float ss = 0.f;
#pragma unroll 4
  for (int j = threadIdx.x; j < n4; j += 256) {
    const float4 v = value(j);
    ss = fmaf(v.x, v.x, ss);
    ss = fmaf(v.y, v.y, ss);
    ss = fmaf(v.z, v.z, ss);
    ss = fmaf(v.w, v.w, ss);
    if (out4) out4[j] = v;
  }
  // Block sum of squares in a fixed order: the same factor in every CTA.
#pragma unroll
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  Bar::sync();
  float tot = 0.f;
#pragma unroll
  for (int w = 0; w < 8; ++w) tot += part[w];
  const float r = rsqrtf(tot / float(p.k) + p.neps);
  // The slice, rounded as sm90_rmsnorm rounds it.
  const int j0 = c0 * layout::kChunkK / 4;
  for (int j = j0 + int(threadIdx.x); j < j0 + n_in / 4; j += 256) {
    const float4 v = value(j);
    const uint2 g4 = reinterpret_cast<const uint2*>(p.ngain)[j];
    const float vv[4] = {v.x, v.y, v.z, v.w},
                g[4] = {bf(g4.x & 0xffffu), bf(g4.x >> 16), bf(g4.y & 0xffffu), bf(g4.y >> 16)};
    uint32_t o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const __nv_bfloat16 h = __float2bfloat16_rn(vv[e] * r * g[e]);
      o[e] = *reinterpret_cast<const uint16_t*>(&h);
    }
    *reinterpret_cast<uint2*>(xs + 4 * (j - j0)) = make_uint2(o[0] | (o[1] << 16), o[2] | (o[3] << 16));
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

// The split's input x[c0 * 64, (c0 + nj) * 64) into xs (BF16): the fused
// RMSNorm's, the fused SwiGLU's (bf16(silu(gate) * up), the rounding of
// sm90_swiglu) or x itself, read through deps (an earlier op wrote it). Called
// by the body's threads after deps.wait(); ends with a barrier.
template <class Bar, class Unit, class Deps>
__device__ __forceinline__ void gemv_stage_x(const DecodeParams& p, const Unit& unit, int c0, int nj,
                                             uint4* gemv_xs, float* part, const Deps& deps) {
  if (p.x_norm) {
    gemv_stage_norm<Bar>(p, reinterpret_cast<uint16_t*>(gemv_xs), c0, nj * layout::kChunkK, part, unit);
  } else if (p.x_swiglu) {
    const uint4* const gg = reinterpret_cast<const uint4*>(p.x + size_t(c0) * layout::kChunkK);
    const uint4* const ug = reinterpret_cast<const uint4*>(p.x + size_t(p.k) + size_t(c0) * layout::kChunkK);
    for (int i = threadIdx.x; i < nj * (layout::kChunkK / 8); i += Bar::threads()) {
      const uint4 g4 = deps.act_v4(gg + i), u4 = deps.act_v4(ug + i);
      const uint32_t* g = &g4.x;
      const uint32_t* u = &u4.x;
      uint4 o;
      uint32_t* ow = &o.x;
#pragma unroll
      for (int w = 0; w < 4; ++w)
        ow[w] = uint32_t(swiglu_bf16(uint16_t(g[w]), uint16_t(u[w]))) |
                (uint32_t(swiglu_bf16(uint16_t(g[w] >> 16), uint16_t(u[w] >> 16))) << 16);
      gemv_xs[i] = o;
    }
    Bar::sync();
  } else {
    const uint4* const xg = reinterpret_cast<const uint4*>(p.x + size_t(c0) * layout::kChunkK);
    for (int i = threadIdx.x; i < nj * (layout::kChunkK / 8); i += Bar::threads())
      gemv_xs[i] = deps.act_v4(xg + i);
    Bar::sync();
  }
}

// One unit (work_unit.h): column group unit.x() (8 TM tiles), K split
// unit.y(); 256 threads; xs: the dynamic shared memory (the launcher's bytes:
// the split's x slice and its tiles' scales).
template <int G, int TM, int U, class Unit, class Deps>
__device__ __forceinline__ void w4a16_gemv_unit(const DecodeParams& p, const Unit& unit, int /*units*/,
                                                const W4a16Smem& sm, uint4* gemv_xs, const Deps& deps) {
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
  // This split's activations, staged in shared memory (dynamic: kb_per_split x
  // 256 bytes): x[c0*64 + 16c + ...], the same 16 activations for every g (a
  // broadcast). Read from global memory, the first warp of a CTA to touch each
  // line waited on L2 once per chunk (docs/PERF.md: with x always in
  // L1 the gemv's arithmetic cost the floor 6%).
  const uint4* const xrow = gemv_xs + 2 * c;

  float acc[TM][1][4], blk[TM][1][4];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[tm][0][i] = blk[tm][0][i] = 0.f;

  // ---- shared memory: [x slice: nj x 64 BF16][scales: 8*TM tiles][ngrp][16 FP16] --
  const int ngrp = (nj * layout::kChunkK + G - 1) / G;
  uint32_t* const ss = reinterpret_cast<uint32_t*>(gemv_xs + nj * (layout::kChunkK / 8));
  gemv_stage_scales<G, TM>(p, unit, c0, ngrp, ss, blockDim.x);

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
  gemv_stage_x<CtaBarrier>(p, unit, c0, nj, gemv_xs, sm.part, deps);
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
          for (int tm = 0; tm < TM; ++tm) sv[tm] = ss[((tm * 8 + warp) * ngrp + gi) * 8 + g];
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
  __shared__ float part[8];
  __shared__ uint32_t s_last;
  w4a16_gemv_unit<G, TM, U>(p, BlockUnit{}, gridDim.x * gridDim.y, W4a16Smem{part, &s_last}, gemv_xs,
                            PdlDeps{});
}

}  // namespace futr::device
