// sm90_w4a16_sk: the decode GEMM y[M,N] = x[M,K] * W[N,K]^T for 1 <= M <= 8,
// W INT4 with FP16 group scales (G = 128 or 64), x and y BF16, FP32
// accumulation: per-lane 16-byte weight loads under a stream-K partition of
// the resident grid.
//
// Why (docs/PERF.md): a no-compute probe that adds
// the gemv's work to the floor (dev/bench/w4a16_probe.cuh) streams at
// 1.26x the floor when every CTA of a full 4-per-SM grid gets the same bytes;
// the gemv's grid (columns x splits) leaves SMs with 3 or 4 CTAs and pays a
// split-K epilogue in every CTA (1.54x). Here the grid is what is resident and
// every CTA streams the same number of chunks, with nothing but one 16-byte
// load per lane and chunk in the loop: the CTA's x and group scales are staged
// in shared memory once, and the weight pointer advances by a constant.
//
// Work. The chunk space is linear, group-major: chunk j = grp * nchunks + ch
// (tile group grp of 8 tiles = 128 channels, k64 chunk ch). CTA i takes the
// chunks of the items (grp, k128 block) [i T / P, (i+1) T / P); its 8 warps
// walk them in step, warp w reading tile w of the group. Because a group is
// stored chunk-major and the groups follow each other (layout/int4_fragment.cuh),
// chunk j of a full group lives at j * 4 KB + w * 512 B: the pointer moves by
// 4 KB per chunk; entering a last group of fewer than 8 tiles only changes the
// stride (its surplus warps load nothing and store nothing).
// Loads go in batches of U chunks issued together and then consumed (the
// probe's order: a ring refilled one chunk at a time measured ~9% slower);
// NB = 2 keeps a second batch in flight while one is consumed (3 CTAs/SM).
// A CTA's chunks span at most two groups (the launcher keeps its items within
// one group's count): the first segment's sums are parked in registers when
// it ends, and after the stream segment_store (sm90_w4a16_common.cuh) writes
// y or each segment's partial and runs the last-contributor reduction.
//
// Shared memory (dynamic; host: sk_smem_bytes): [scales: nsg x 8 tiles x 16
// FP16][x: M rows x (nj x 64 + 8) BF16] for the CTA's nsg scale groups and nj
// chunks; the 16-byte pad per row keeps the 8 rows' B-operand reads on
// distinct banks. Lane (g, c) reads row min(g, M - 1) (rows >= M are never
// stored).
//
// PDL: the first batch of weights and the scales (not produced by the previous
// kernel) are loaded before griddepcontrol.wait; x, ws and y only after it.
//
// SwiGLU fused in (p.x_swiglu): x is [M, 2K] gate|up and the staged input is
// bf16(silu(gate) * up), rounded as sm90_swiglu rounds it.
//
// Limits: M <= 8, N % 16 == 0, K % 64 == 0 (K % 128 == 0 if G == 128);
// 16-byte aligned pointers; ws >= (ngroups + gridDim.x) * M * 128 floats.
// Test: dev/tests/w4a16_dev_test.cpp. Bench: bench/w4a16_bench.cpp (its --sweep).
#pragma once

#include "dev/kernels/sm90_w4a16_stream_k.cuh"
#include "kernels/epilogue/swiglu_bf16.cuh"
#include "kernels/ptx/pdl.cuh"

namespace futr::device {

// Dynamic shared memory of a CTA with at most `max_chunks` chunks (host and device).
template <int G>
__host__ __device__ constexpr size_t sk_smem_bytes(int m, int max_chunks) {
  return size_t(max_chunks / (G / layout::kChunkK) + 1) * layout::kTileGroup * layout::kTileN * 2 +
         size_t(m) * (size_t(max_chunks) * layout::kChunkK + 8) * 2;
}

template <int G, int U, int NB>
__global__ void __launch_bounds__(256, NB == 1 ? 4 : 3) sm90_w4a16_sk_kernel(const DecodeParams p) {
  static_assert(U == 2 || U == 4 || U == 8, "batch: 2, 4 or 8 chunks (whole 128-blocks)");
  static_assert(NB == 1 || NB == 2, "batches in flight: 1 (4 CTAs/SM) or 2 (3 CTAs/SM, 85 registers)");
  using WF = Int4Format<G>;
  constexpr int kCps = G / layout::kChunkK;  // chunks per scale group (1 or 2)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int ntiles = p.n / layout::kTileN;
  const int nchunks = p.k / layout::kChunkK;
  const int nblk = (nchunks + 1) / 2;
  const int ngroups = (ntiles + layout::kTileGroup - 1) / layout::kTileGroup;
  const int total = ngroups * nblk;
  const int lo = stream_first(blockIdx.x, total, gridDim.x),
            hi = stream_first(blockIdx.x + 1, total, gridDim.x);
  // The CTA's chunks [cs, cs + nj) of the linear chunk space (cs even).
  const int cs = (lo / nblk) * nchunks + 2 * (lo % nblk);
  const int nj = (hi / nblk) * nchunks + 2 * (hi % nblk) - cs;
  ptx::griddep_launch_dependents();  // PDL: the next kernel may launch (see ptx/pdl.cuh)

  // ---- the load cursor: this lane's next 16-byte piece ------------------------
  // Groups follow each other chunk after chunk, so the piece of warp w moves by
  // a constant: 4 KB (8 tiles x 512 B) in a full group, gt x 512 B in the last
  // group when it has gt < 8 tiles (entered at local chunk pstart, where the
  // pointer continues seamlessly; warps w >= gt load nothing there).
  const int tail_gt = ntiles - (ngroups - 1) * layout::kTileGroup;  // tiles of the last group
  const int pstart = (ngroups - 1) * nchunks - cs;                  // local chunk where it starts
  bool lvalid = pstart > 0 || warp < tail_gt;
  const uint8_t* wp =
      p.w +
      layout::tile_chunk_offset(ntiles, p.k, layout::kInt4ChunkBytes,
                                min(cs / nchunks * layout::kTileGroup + warp, ntiles - 1), cs % nchunks) +
      lane * 16;
  int lstride = (pstart > 0 ? layout::kTileGroup : tail_gt) * layout::kInt4ChunkBytes;
  auto load = [&](int jl, uint32_t(&w)[1][4]) {  // load local chunk jl, step to jl + 1
    if (lvalid) WF::load(wp, w[0]);
    wp += lstride;
    if (jl + 1 == pstart) lstride = tail_gt * layout::kInt4ChunkBytes, lvalid = warp < tail_gt;
  };
  uint32_t wr[NB][U][1][4];  // NB batches of U chunks in flight
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (b * U + u < nj) load(b * U + u, wr[b][u]);

  // ---- shared memory: the CTA's scales (before the wait), then x (after) -----
  extern __shared__ uint4 sk_smem[];
  const int s0 = cs / kCps;  // first scale group (linear: grp * K/G + gi)
  const int nsg = (cs + nj + kCps - 1) / kCps - s0;
  uint32_t* const ss = reinterpret_cast<uint32_t*>(sk_smem);  // [nsg][8 tiles][8 words]
  {
    const int gpk = p.k / G;  // scale groups per tile
    const uint16_t* const sc = static_cast<const uint16_t*>(p.scales);
    for (int i = threadIdx.x; i < nsg * 16; i += blockDim.x) {  // 16-byte pieces, 2 per tile
      const int sg = s0 + i / 16, t = (i / 2) % 8;
      const int tile = (sg / gpk) * layout::kTileGroup + t;
      if (tile < ntiles)
        sk_smem[i] = ptx::ld_cached_v4(sc + (size_t(tile) * gpk + sg % gpk) * layout::kTileN + 8 * (i % 2));
    }
  }
  const int xstride = nj * layout::kChunkK + 8;  // BF16 per staged row of x
  uint4* const xs = sk_smem + nsg * 16;
  ptx::griddep_wait();  // x, ws, counters and y belong to the previous kernel until here
  {
    const int per_row = nj * (layout::kChunkK / 8);  // 16-byte pieces per row
    for (int i = threadIdx.x; i < p.m * per_row; i += blockDim.x) {
      const int r = i / per_row, q = i % per_row;
      const int ch = (cs + q / 8) % nchunks;
      const size_t off = size_t(ch) * layout::kChunkK + 8 * (q % 8);  // element of the row
      uint4 o;
      if (p.x_swiglu) {
        const __nv_bfloat16* const row = p.x + size_t(r) * 2 * p.k;
        const uint4 g4 = ptx::ld_cached_v4(row + off), u4 = ptx::ld_cached_v4(row + p.k + off);
        const uint32_t* gw = &g4.x;
        const uint32_t* uw = &u4.x;
        uint32_t* ow = &o.x;
#pragma unroll
        for (int w = 0; w < 4; ++w)
          ow[w] = uint32_t(swiglu_bf16(uint16_t(gw[w]), uint16_t(uw[w]))) |
                  (uint32_t(swiglu_bf16(uint16_t(gw[w] >> 16), uint16_t(uw[w] >> 16))) << 16);
      } else {
        o = ptx::ld_cached_v4(p.x + size_t(r) * p.k + off);
      }
      xs[(r * xstride) / 8 + q] = o;
    }
  }
  __syncthreads();

  // ---- main loop ------------------------------------------------------------
  // At most two segments (the host keeps a CTA's items <= a group's): the
  // chunks of group sgrp before local chunk b1, then those of group sgrp + 1.
  // The first is parked in registers (dacc) when it ends, and both are stored
  // after the stream: no fence or barrier while weights are in flight, and no
  // epilogue code in the loop (its registers made the loop spill the weights).
  const uint4* const xrow = xs + (min(g, p.m - 1) * xstride) / 8 + 2 * c;
  const uint32_t* const srow = ss + warp * 8 + g;
  float acc[1][1][4] = {{{0.f, 0.f, 0.f, 0.f}}}, blk[1][1][4], dacc[1][1][4] = {{{0.f, 0.f, 0.f, 0.f}}};
  const int b1 = nchunks - cs % nchunks;   // first local chunk of the second segment (>= nj: none)
  const int park = b1 < nj ? b1 - 1 : -1;  // the local chunk that ends the first of two segments
  auto consume = [&](const uint32_t(&w)[1][4], int jl, bool start, bool end) {
    const uint4 xq[1][2] = {{xrow[jl * 8], xrow[jl * 8 + 1]}};
    chunk_mma<WF, 1, 1>(blk, acc, w, xq, start);
    if (end) {
      const uint32_t sv[1] = {srow[(jl / kCps) * layout::kTileGroup * 8]};
      apply_scales<1, 1>(acc, blk, sv);
    }
    if (jl == park) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dacc[0][0][i] = acc[0][0][i], acc[0][0][i] = 0.f;
    }
  };
#pragma unroll 1
  for (int j0 = 0; j0 < nj; j0 += NB * U) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      // cs is even and (G = 128) every group has an even number of chunks: the
      // chunk's parity within its scale group is u's.
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (j0 + b * U + u < nj) consume(wr[b][u], j0 + b * U + u, WF::group_start(u), WF::group_end(u));
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (j0 + (b + NB) * U + u < nj) load(j0 + (b + NB) * U + u, wr[b][u]);
    }
  }

  // ---- the segments' epilogue ----------------------------------------------------
  __shared__ uint32_t s_last;
  const int sgrp = cs / nchunks;
  auto flush = [&](float(&a)[1][1][4], int grp, bool whole) {
    if (p.probe & 1) {  // measurement: no epilogue (results are wrong)
      if (a[0][0][0] == 12345.f) p.y[threadIdx.x] = __float2bfloat16_rn(a[0][0][1]);
      return;
    }
    const int gt = min(layout::kTileGroup, ntiles - grp * layout::kTileGroup);
    segment_store<WF, 1, 1>(
        p, a, grp, gt, warp, whole, grp + int(blockIdx.x), stream_owner(grp * nblk, total, gridDim.x),
        stream_owner(grp * nblk + nblk - 1, total, gridDim.x), &s_last, [] { __syncthreads(); }, blockDim.x,
        g, c);
  };
  if (b1 < nj) {
    flush(dacc, sgrp, b1 == nchunks);
    flush(acc, sgrp + 1, nj - b1 == nchunks);
  } else {
    flush(acc, sgrp, nj == nchunks);
  }
}

}  // namespace futr::device
