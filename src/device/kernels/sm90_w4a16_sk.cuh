// sm90_w4a16_sk: the decode GEMM y[M,N] = x[M,K] * W[N,K]^T for 1 <= M <= 8,
// W INT4 with FP16 group scales (G = 128 or 64), x and y BF16, FP32
// accumulation: the gemv's per-lane 16-byte weight loads under a stream-K
// partition.
//
// Why (docs/PERF.md, issue 11 round 2): the probe that adds the gemv's work
// to the no-compute floor (bench/kernels/w4a16_probe.cuh) streams at 1.26x the
// floor with all of it (dequantization, MMAs, x from L1, scale loads, CTA-
// contiguous order) when every CTA of a full 4-per-SM grid gets the same
// bytes; the gemv's grid (columns x splits) leaves SMs with 3 or 4 CTAs and
// pays a split-K epilogue per CTA (1.54x). Here the grid is exactly what is
// resident and every CTA streams the same number of chunks.
//
// Work. The chunk space is linear, group-major: chunk j = grp * nchunks + ch
// (tile group grp of 8 tiles = 128 channels, k64 chunk ch). CTA i takes the
// chunks of the items (grp, k128 block) [i T / P, (i+1) T / P); its 8 warps
// walk them in step, warp w reading tile w of the group (one 16-byte fragment
// per lane and chunk, layout/int4_fragment.cuh), in batches of U chunks whose
// loads are issued together and then consumed (the probe's order: a batch
// measured faster than a ring refilled one chunk at a time). A chunk's group scale is loaded with its weights;
// x comes from L1 (rows >= M read row M-1, never stored). At a group's last
// chunk or the CTA's last one, segment_store (sm90_w4a16_common.cuh) writes y
// or the partial sum and runs the last-contributor reduction.
//
// PDL: the first batch of weights and scales is loaded before
// griddepcontrol.wait; x, ws and y are touched only after it.
//
// Limits: M <= 8, N % 16 == 0, K % 64 == 0 (K % 128 == 0 if G == 128);
// 16-byte aligned pointers; ws >= (ngroups + gridDim.x) * M * 128 floats.
// Test: tests/device/w4a16_test.cpp. Bench: bench/w4a16_bench.cpp.
#pragma once

#include "device/kernels/sm90_w4a16_common.cuh"
#include "device/ptx/pdl.cuh"

namespace futr::device {

template <int G, int U>
__global__ void __launch_bounds__(256, 4) sm90_w4a16_sk_kernel(const DecodeParams p) {
  static_assert(U == 2 || U == 4 || U == 8, "batch: 2, 4 or 8 chunks (whole 128-blocks)");
  using WF = Int4Format<G>;
  constexpr int kGroupChunks = G / layout::kChunkK;  // chunks per scale group (1 or 2)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int ntiles = p.n / layout::kTileN;
  const int nchunks = p.k / layout::kChunkK;
  const int nblk = (nchunks + 1) / 2;
  const int ngroups = (ntiles + layout::kTileGroup - 1) / layout::kTileGroup;
  const int total = ngroups * nblk;
  const int lo = stream_first(blockIdx.x, total, gridDim.x), hi = stream_first(blockIdx.x + 1, total, gridDim.x);
  // The CTA's chunks [cs, ce) of the linear chunk space.
  const int cs = (lo / nblk) * nchunks + 2 * (lo % nblk);
  const int ce = (hi / nblk) * nchunks + 2 * (hi % nblk);
  ptx::griddep_launch_dependents();  // PDL: the next kernel may launch (see ptx/pdl.cuh)

  // Where this lane's fragment and scale word of chunk (grp, ch) are.
  auto wptr = [&](int grp, int ch) {
    const int r = min(warp, min(layout::kTileGroup, ntiles - grp * layout::kTileGroup) - 1);
    return p.w + layout::tile_chunk_offset(ntiles, p.k, WF::kChunkBytes, grp * layout::kTileGroup + r, ch) +
           lane * 16;
  };
  auto sptr = [&](int grp, int ch) {
    const int r = min(warp, min(layout::kTileGroup, ntiles - grp * layout::kTileGroup) - 1);
    return WF::scale_ptr(p.scales, p.k, grp * layout::kTileGroup + r, ch, g);
  };

  uint32_t wr[U][1][4];
  uint32_t sr[U];
  int lgrp = cs / nchunks, lch = cs % nchunks;  // the next chunk to load
  auto load_batch = [&](int j0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (j0 + u < ce) {
        WF::load(wptr(lgrp, lch), wr[u][0]);
        sr[u] = WF::load_scale(sptr(lgrp, lch));
        if (++lch == nchunks) lch = 0, ++lgrp;
      }
  };
  load_batch(cs);
  ptx::griddep_wait();  // x, ws, counters and y belong to the previous kernel until here

  const uint4* const xrow = reinterpret_cast<const uint4*>(p.x + size_t(min(g, p.m - 1)) * p.k + 16 * c);
  __shared__ uint32_t s_last;
  float acc[1][1][4] = {{{0.f, 0.f, 0.f, 0.f}}}, blk[1][1][4];
  int grp = cs / nchunks, ch = cs % nchunks, seg_ch0 = ch;
#pragma unroll 1
  for (int j0 = cs; j0 < ce; j0 += U) {
    if (j0 != cs) load_batch(j0);  // the batch's loads are issued together (the first one before the wait)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u >= ce) break;
      const uint4* const px = xrow + size_t(ch) * (layout::kChunkK / 8);
      const uint4 xq[1][2] = {{ptx::ld_cached_v4(px), ptx::ld_cached_v4(px + 1)}};
      chunk_mma<WF, 1, 1>(blk, acc, wr[u], xq, ch % kGroupChunks == 0);
      const bool last_of_k = ch + 1 == nchunks;
      if ((ch + 1) % kGroupChunks == 0 || last_of_k) {
        const uint32_t s1[1] = {sr[u]};
        apply_scales<1, 1>(acc, blk, s1);
      }
      const bool seg_end = last_of_k || j0 + u + 1 == ce;
      const int this_grp = grp, this_ch0 = seg_ch0;
      if (++ch == nchunks) ch = 0, ++grp;
      if (!seg_end) continue;
      seg_ch0 = ch;
      const int gt = min(layout::kTileGroup, ntiles - this_grp * layout::kTileGroup);
      segment_store<WF, 1, 1>(p, acc, this_grp, gt, warp, this_ch0 == 0 && last_of_k, this_grp + int(blockIdx.x),
                              stream_owner(this_grp * nblk, total, gridDim.x),
                              stream_owner(this_grp * nblk + nblk - 1, total, gridDim.x), &s_last,
                              [] { __syncthreads(); }, g, c);
    }
  }
}

}  // namespace futr::device
