// sm90_w4a16_gemv_ring: the one-row INT4 gemv of sm90_w4a16_gemv as a
// persistent kernel's work unit whose weights arrive through a shared-memory
// ring that a producer warp fills ahead of the units, across op boundaries.
//
// Why: a unit of the register-streaming gemv (sm90_w4a16_gemv.cuh) issues its
// first U chunks, waits for its inputs, then streams the rest: at every op
// boundary of a persistent step each SM's weight stream drains while its
// CTAs wait for the op before, and restarts only after. Here one producer
// warp per CTA walks the same op list as the consumers and copies each of
// the CTA's future units' weight chunks into the ring (cp.async.bulk: one
// contiguous run per chunk, no registers held), limited only by the ring's
// free stages, never by the activations. The consumers (the 8 warps of the
// body) meet the dependency wait while the ring keeps filling, then read
// their chunks from shared memory.
//
//   ring stage s (kRingStageBytes): chunks j .. j + 1 of a unit's 8 tiles, chunk
//   u's tile r at u * gt * 512 + r * 512 (layout::tile_chunk_offset: a tile
//   group's chunks are consecutive runs of gt * 512 bytes, gt = the group's
//   tiles, 8 but for the last group of N; one copy per stage)
//   full[s]  count 1: the producer's arrive.expect_tx + the copy's bytes
//   empty[s] count 256: each consumer thread arrives once it holds its
//            fragments in registers
//
// The arithmetic is the register gemv's, chunk for chunk (the same fragments,
// chunk_mma, group scales and split-K store), so a unit computes the same
// bits under either body. Only for one-row gemvs with one tile per warp (TM =
// 1), the decode step's M = 1 choice.
//
// Test: tests/kernels/persistent_step_test.cpp. Benchmark: bench/persistent_step_bench.cpp.
#pragma once

#include <cstdint>

#include "kernels/ptx/fence.cuh"
#include "kernels/ptx/mbarrier.cuh"
#include "kernels/ptx/sync.cuh"
#include "kernels/ptx/tma.cuh"
#include "kernels/sm90_w4a16_gemv.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

// A stage: up to kRingStageChunks consecutive chunks of one unit (a G = 128
// group per pair), each chunk of a group of 8 tiles.
inline constexpr int kRingStageChunks = 2;
inline constexpr int kRingStageBytes = kRingStageChunks * layout::kTileGroup * layout::kInt4ChunkBytes;

// A CTA's weight ring in shared memory and one side's position in it (the
// producer and each consumer thread keep their own; both walk the same
// chunks in the same order).
struct WeightRing {
  uint8_t* stages;  // [n][kRingStageBytes]
  uint64_t* full;   // [n]
  uint64_t* empty;  // [n]
  int n;            // stages
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == n) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Where a unit's weights are: chunks [c0, c0 + nj) of column group `col`
// (WarpTiles' split of K), each a run of `bytes` at src + j * bytes.
struct GemvUnitRun {
  const uint8_t* src;
  int nj, bytes;
  __device__ __forceinline__ GemvUnitRun(const DecodeParams& p, unsigned col, unsigned split) {
    const int ntiles = p.n / layout::kTileN;
    const int nchunks = p.k / layout::kChunkK;
    const int nblk = (p.k + layout::kBlockK - 1) / layout::kBlockK;
    const int kb0 = int(split) * p.kb_per_split;
    const int c0 = 2 * kb0;
    nj = max(0, min(nchunks, 2 * min(nblk, kb0 + p.kb_per_split)) - c0);
    const int t0 = int(col) * layout::kTileGroup;
    bytes = chunk_bytes(p, col);
    src = p.w + layout::tile_chunk_offset(ntiles, p.k, layout::kInt4ChunkBytes, t0, c0);
  }
  // One chunk of the column group's tiles (8, fewer in the last group of N).
  __device__ __forceinline__ static int chunk_bytes(const DecodeParams& p, unsigned col) {
    return min(layout::kTileGroup, p.n / layout::kTileN - int(col) * layout::kTileGroup) *
           layout::kInt4ChunkBytes;
  }
};

// The producer's part of a unit: one bulk copy per chunk into the next free
// stage. One thread calls it; t: the unit's timestamps, or null.
__device__ __forceinline__ void gemv_ring_produce(const DecodeParams& p, const LinearUnit& unit,
                                                  WeightRing& r, PersistentUnitTimes* t) {
  const GemvUnitRun run(p, unit.x(), unit.y());
  for (int j = 0; j < run.nj; j += kRingStageChunks) {
    // The unit's chunks are consecutive runs: a stage's are one copy.
    const uint32_t bytes = uint32_t(min(kRingStageChunks, run.nj - j) * run.bytes);
    ptx::mbarrier_wait_parity(r.empty + r.stage, r.phase ^ 1u);
    if (t && j == 0) t->produce_first = ptx::globaltimer();
    ptx::mbarrier_arrive_expect_tx(r.full + r.stage, bytes);
    ptx::cp_async_bulk_g2s(r.stages + size_t(r.stage) * kRingStageBytes, run.src + size_t(j) * run.bytes,
                           bytes, r.full + r.stage);
    r.advance();
  }
  if (t) t->produce_last = ptx::globaltimer();
}

// One unit (work_unit.h), the consumers' part: 256 threads (warps 0..7),
// barrier ConsumerBarrier; xs: the dynamic x slice + scales as the register
// gemv's; r: this thread's position in the ring (every consumer thread walks
// it).
template <int G, class Deps>
__device__ __forceinline__ void w4a16_gemv_ring_unit(const DecodeParams& p, const LinearUnit& unit,
                                                     const W4a16Smem& sm, uint4* gemv_xs, WeightRing& r,
                                                     const Deps& deps, uint64_t* computed = nullptr) {
  using WF = Int4Format<G>;
  using Bar = ConsumerBarrier;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const WarpTiles<WF, 1> wt(p, warp, lane, unit.x(), unit.y());
  const int c0 = wt.c0, nj = wt.nj;
  const uint4* const xrow = gemv_xs + 2 * c;

  float acc[1][1][4], blk[1][1][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[0][0][i] = blk[0][0][i] = 0.f;

  const int ngrp = (nj * layout::kChunkK + G - 1) / G;
  uint32_t* const ss = reinterpret_cast<uint32_t*>(gemv_xs + nj * (layout::kChunkK / 8));
  gemv_stage_scales<G, 1>(p, unit, c0, ngrp, ss, Bar::kThreads);

  deps.wait();
  gemv_stage_x<Bar, 1>(p, unit, c0, nj, gemv_xs, sm.part, deps);
  // x is read one chunk ahead so its latency overlaps the MMAs of the chunk before.
  uint4 xn0 = xrow[0], xn1 = xrow[1];
  int xoff = 0;
  const int run_bytes = GemvUnitRun::chunk_bytes(p, unit.x());
  uint32_t wr[kRingStageChunks][1][4];
  for (int j0 = 0; j0 < nj; j0 += kRingStageChunks) {
    // A stage: chunks j0 .. j0 + n - 1 of the unit, chunk u's tile r at
    // u * run_bytes + r * 512. Each thread gives the stage back once its
    // fragments are in registers.
    const int n = min(kRingStageChunks, nj - j0);
    ptx::mbarrier_wait_parity(r.full + r.stage, r.phase);
    const uint8_t* const st = r.stages + size_t(r.stage) * kRingStageBytes + warp * 512 + lane * 16;
#pragma unroll
    for (int u = 0; u < kRingStageChunks; ++u)
      if (u < n) {
        const uint4 v = *reinterpret_cast<const uint4*>(st + u * run_bytes);
        wr[u][0][0] = v.x, wr[u][0][1] = v.y, wr[u][0][2] = v.z, wr[u][0][3] = v.w;
      }
    // The copy engine (the async proxy) refills the stage after the
    // arrivals: order this thread's generic reads before it.
    ptx::fence_proxy_async_shared_cta();
    ptx::mbarrier_arrive(r.empty + r.stage);
    r.advance();
#pragma unroll
    for (int u = 0; u < kRingStageChunks; ++u) {
      if (u < n) {
        uint4 xq[1][2] = {{xn0, xn1}};
        xoff += layout::kChunkK / 8;
        if (j0 + u + 1 < nj) {
          xn0 = xrow[xoff];
          xn1 = xrow[xoff + 1];
        }
        chunk_mma<WF, 1, 1>(blk, acc, wr[u], xq, WF::group_start(u));
        if (WF::group_end(u) || j0 + u + 1 == nj) {
          const int gi = (j0 + u) * layout::kChunkK / G;
          const uint32_t sv[1] = {ss[(warp * ngrp + gi) * 8 + g]};
          apply_scales<1, 1>(acc, blk, sv);
        }
      }
    }
  }

  if (computed && threadIdx.x == 0) *computed = ptx::globaltimer();
  store_output<WF, 1, 1, LinearUnit, Bar>(p, acc, wt.tile, wt.tok, g, c, unit, *sm.last);
}

}  // namespace futr::device
