// sm90_w4a16_skinny: y[M,N] = x[M,K] * W[N,K]^T for 2 <= M <= 32 query rows
// (batched decode), W in a packed weight format WF, x and y BF16, FP32 accumulation.
//
//   WF = Int4Format<G>: W[n,k] = q[n,k] * s[n, k/G] (INT4, FP16 group scales
//        applied to each group's FP32 partial sum after accumulation);
//   WF = E4M3Format:    W[n,k] = e4m3[n,k] * s[n]   (the W8A16 comparison path:
//        same kernel, a different dequantizer and one FP32 scale per channel).
//   (policies, chunk MMAs and the split-K epilogue: sm90_w4a16_common.cuh)
//
// Roles: the weights are the MMA's A operand (16 channels per tile), the rows of
// x its B operand (MT tiles of 8 rows: M <= 8, 16, 32 -> MT = 1, 2, 4).
//
// Work split. A CTA of 8 warps owns 8*TM weight tiles (warp w: tiles w, w+8,
// ...: the 8 warps read neighbouring tiles) and one K slice of kb_per_split
// k128 blocks (split-K over gridDim.y; the last CTA of a column reduces, no
// second pass), or, with sequential splits (p.vsplit_chunks), all of K with
// the splits' sums folded in registers in the reduction's order: the same
// bits as the split launch, without its partials' traffic (large M). Each lane streams its own weight
// fragments through a lane-private ring in shared memory: cp.async copies of the next WF::kStages k64 chunks
// are in flight while the lane computes (a lane reads back only what it copied itself, so cp.async.wait_group
// orders it and no barrier is needed; a register ring that deep would not fit in 128 registers). Activation
// fragments come from global memory (shared by all warps of the CTA: L1 serves them).
//
// Few instructions per chunk: ring slots are compile-time (the loop is unrolled
// by the ring depth), pointers advance by constant strides, rows >= M read row
// M-1 (their results are discarded: no predicates or zeroing), each group's sum
// starts with a C = 0 MMA, and every operand register comes straight from a load
// or the dequantizer.
//
// PDL: launched as a programmatic dependent, the ring's first cp.async copies
// are issued before griddepcontrol.wait and x is read only after it.
//
// Limits: 1 <= M <= 8*MT, N % 16 == 0, K % 64 == 0 (K % 128 == 0 if G == 128),
// 16-byte aligned pointers; one launch per workspace at a time; dynamic shared
// memory skinny_smem_bytes<WF, TM, MT>() (src/launch/w4a16.cu checks and sets all of this).
// Test: tests/kernels/w4a16_test.cpp. Bench: bench/w4a16_bench.cpp.
// Work unit: w4a16_skinny_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include "kernels/ptx/pdl.cuh"
#include "kernels/sm90_w4a16_common.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

// Dynamic shared memory of one CTA: the lane-private rings of weights (and
// scales), then the sequential splits' folded sums (thread-private, [TM*MT*4][256]
// floats: in registers they made the M = 32 variant spill).
template <class WF, int TM, int MT>
constexpr size_t skinny_smem_bytes() {
  return size_t(WF::kStages) * TM * 256 * (WF::kWords * 4 + (WF::kGroupScales ? 4 : 0)) +
         size_t(TM) * MT * 4 * 256 * sizeof(float);
}

// One unit (work_unit.h): column group unit.x() (8 TM tiles), K split
// unit.y(); 256 threads; smem: the dynamic shared memory
// (skinny_smem_bytes); sm.part unused.
template <class WF, int MT, int TM, class Unit, class Deps>
__device__ __forceinline__ void w4a16_skinny_unit(const DecodeParams& p, const Unit& unit, int /*units*/,
                                                  const W4a16Smem& sm, uint4* smem, const Deps& deps) {
  static_assert(MT == 1 || MT == 2 || MT == 4, "MT row tiles of 8: 1, 2 or 4");
  static_assert(TM == 1 || TM == 2, "TM weight tiles of 16 channels per warp: 1 or 2");
  static_assert(WF::kStages % 2 == 0, "the ring must hold whole 128-blocks (G = 128 groups)");
  constexpr int kW = WF::kWords;
  constexpr int kS = WF::kStages;
  constexpr int kChunks16 = kW / 4;  // 16-byte pieces per lane per tile and chunk

  // ---- indices ------------------------------------------------------------
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  deps.release();  // the next op may start (launch executor: PDL, see ptx/pdl.cuh)
  WarpTiles<WF, TM> wt(p, warp, lane, unit.x(), unit.y());
  const int c0 = wt.c0, nj = wt.nj;
  auto& wnext = wt.wnext;
  auto& snext = wt.snext;
  const auto& wstride = wt.wstride;
  // The lane's activations: row 8mt + g (rows >= M read M-1), inputs c0*64 + 16c + ...
  const uint4* xrow[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int row = min(8 * mt + g, p.m - 1);
    xrow[mt] =
        reinterpret_cast<const uint4*>(p.x + size_t(row) * p.k + size_t(c0) * layout::kChunkK + 16 * c);
  }

  float acc[TM][MT][4], blk[TM][MT][4];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[tm][mt][i] = blk[tm][mt][i] = 0.f;

  // ---- shared memory: lane-private cp.async rings [kS][TM][kChunks16][256] -----
  uint4* const wring = smem + threadIdx.x;
  uint32_t* const sring = reinterpret_cast<uint32_t*>(smem + kS * TM * kChunks16 * 256) + threadIdx.x;
  // Sequential splits (p.vsplit_chunks > 0): this thread's folded sums, [TM*MT*4][256].
  float* const srun = reinterpret_cast<float*>(smem + kS * TM * kChunks16 * 256) +
                      (WF::kGroupScales ? kS * TM * 256 : 0) + threadIdx.x;
  auto run = [&](int tm, int mt, int i) -> float& { return srun[((tm * MT + mt) * 4 + i) * 256]; };
  // At the end of each split's chunks run += acc, acc = 0 (run starts at +0:
  // the reduction's (0 + s_0) + s_1 ...).
  auto fold = [&] {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          run(tm, mt, i) = __fadd_rn(run(tm, mt, i), acc[tm][mt][i]);
          acc[tm][mt][i] = 0.f;
        }
  };
  int vleft =
      p.vsplit_chunks;  // chunks left in the current split (never 0 without splits: the count starts at 0)
  if (p.vsplit_chunks > 0)
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) run(tm, mt, i) = 0.f;
  auto fill = [&](int st) {  // copies the next chunk into slot st; one commit group
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) {
      WF::issue(wnext[tm], wring + (st * TM + tm) * kChunks16 * 256);
      if constexpr (WF::kGroupScales) WF::issue_scale(snext[tm], sring + (st * TM + tm) * 256);
      wnext[tm] += wstride[tm];
      snext[tm] += WF::scale_step(st);
    }
    ptx::cp_async_commit();
  };

  // ---- main loop: kS chunks in flight; unrolled by kS so slots are constants --
#pragma unroll
  for (int st = 0; st < kS; ++st) {
    if (st < nj) fill(st);
    else ptx::cp_async_commit();  // empty group: keeps the group count uniform
  }
  // PDL: the ring above already streams weights; x (and y, ws) belong to the
  // previous op until the wait.
  deps.wait();
  // x is loaded one chunk ahead: its latency (L2 for the first warp of a CTA
  // to touch a chunk) overlaps the MMAs of the chunk before (docs/PERF.md: with
  // the load right before use, warps stalled ~10 cycles per instruction).
  uint4 xn[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    xn[mt][0] = ptx::ld_cached_v4(xrow[mt]);
    xn[mt][1] = ptx::ld_cached_v4(xrow[mt] + 1);
  }
  int xoff = 0;  // uint4 offset of the current chunk in the activation rows
  for (int j0 = 0; j0 < nj; j0 += kS) {
#pragma unroll
    for (int st = 0; st < kS; ++st) {
      if (j0 + st < nj) {
        ptx::cp_async_wait<kS - 1>();  // this lane's copies of chunk j0 + st have landed
        uint32_t w[TM][kW];
        uint32_t sv[TM];
#pragma unroll
        for (int tm = 0; tm < TM; ++tm) {
#pragma unroll
          for (int q = 0; q < kChunks16; ++q) {
            const uint4 v = wring[((st * TM + tm) * kChunks16 + q) * 256];
            w[tm][4 * q] = v.x, w[tm][4 * q + 1] = v.y, w[tm][4 * q + 2] = v.z, w[tm][4 * q + 3] = v.w;
          }
          sv[tm] = WF::kGroupScales ? sring[(st * TM + tm) * 256] : 0u;
        }
        uint4 xq[MT][2];
        xoff += layout::kChunkK / 8;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          xq[mt][0] = xn[mt][0], xq[mt][1] = xn[mt][1];
          if (j0 + st + 1 < nj) {
            xn[mt][0] = ptx::ld_cached_v4(xrow[mt] + xoff);
            xn[mt][1] = ptx::ld_cached_v4(xrow[mt] + xoff + 1);
          }
        }
        chunk_mma<WF, MT, TM>(blk, acc, w, xq, WF::group_start(st));
        if constexpr (WF::kGroupScales)
          if (WF::group_end(st) || j0 + st + 1 == nj) apply_scales<MT, TM>(acc, blk, sv);
        // A split's end (its chunks are whole k128 blocks: the group ended above too).
        if (--vleft == 0 || (p.vsplit_chunks > 0 && j0 + st + 1 == nj)) {
          fold();
          vleft = p.vsplit_chunks;
        }
        // NOTE: the slot is refilled only after its registers were consumed above:
        // in-order issue then guarantees the shared-memory reads completed.
        if (j0 + st + kS < nj) fill(st);
        else ptx::cp_async_commit();
      }
    }
  }
  ptx::cp_async_wait<0>();

  if (p.vsplit_chunks > 0) {  // the folded sum is the output (acc is zero after the last fold)
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[tm][mt][i] = run(tm, mt, i);
  }
  store_output<WF, MT, TM>(p, acc, wt.tile, wt.tok, g, c, unit, *sm.last);
}

template <class WF, int MT, int TM>
__global__ void __launch_bounds__(256, TM == 1 && MT == 1 ? 4 : (TM == 1 && MT == 2 ? 3 : 2))
    sm90_w4a16_skinny_kernel(const DecodeParams p) {
  // NOTE: the rings start 128-byte aligned. The dynamic allocation's base
  // alignment is the largest any declaration of the translation unit asks;
  // at the 16 bytes uint4 gives, the same instructions (only the base offset
  // differs) ran the 8B decode step 3% slower at batch 16 and 32: a warp's
  // cp.async rows then straddle 128-byte lines.
  extern __shared__ __align__(128) uint4 smem[];
  __shared__ uint32_t s_last;
  w4a16_skinny_unit<WF, MT, TM>(p, BlockUnit{}, gridDim.x * gridDim.y, W4a16Smem{nullptr, &s_last}, smem,
                                PdlDeps{});
}

}  // namespace futr::device
