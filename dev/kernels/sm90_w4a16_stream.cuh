// sm90_w4a16_stream: the decode GEMM y[M,N] = x[M,K] * W[N,K]^T for 1 <= M <= 8*MT
// query rows, W in a packed weight format WF (INT4 + FP16 group scales, or the
// E4M3 comparison path), x and y BF16, FP32 accumulation. Replaces the
// register-ring gemv and the lane-private cp.async skinny kernel, whose
// consumers held the bytes in flight in their own registers / copies
// (docs/PERF.md).
//
// Warp-specialised, bulk-copy ring. A CTA = 8/TM consumer warps + 1 producer
// warp. Work = items (tile group of 8 tiles = 128 channels, k128 block). One
// item's weights are ONE contiguous run of 2 chunks x 8 tiles x 512 bytes
// (layout/int4_fragment.cuh): the producer moves it with one cp.async.bulk into
// a stage of a shared-memory ring (kStages stages, ~64 KB per CTA), together
// with the item's activations (one bulk copy per row of x) and its group
// scales (per-lane cp.async), all completing the stage's "full" mbarrier.
// Consumers read weights, activations and scales from shared memory only,
// dequantize into the mma.sync A operand and release the stage ("empty").
// Bytes in flight are bounded by the ring, not by the consumers' registers.
//
// INT4 dequantization (MT <= 2): biased fragments bf16(q + 136) from 4 lop3 and
// 3 shifts per 8 weights (layout::int4x8_to_bf16_biased); one extra MMA per
// k16 step with an all-ones A operand gives sum_k x[k] per row, shared by all
// weight tiles, and each group's sum is corrected by -136 * that sum before its
// scale is applied. For MT = 4 (M up to 32) the MMA pipe is the busier one and
// the exact lop3 + fma dequantizer is used instead.
//
// Stream-K partition: the ngroups x nblk items, group-major, are cut into
// gridDim.x equal contiguous ranges (CTA i: [i T / P, (i+1) T / P)) with
// gridDim.x = the CTAs resident at once: every CTA streams the same bytes in
// one wave, and its producer runs on across segment boundaries. A CTA's range
// is cut at tile-group boundaries into segments; a segment covering a whole
// group writes y, the others publish FP32 partials to ws[group + run][M][128];
// the last of a group's contributors (arrival counter per group) sums them in
// CTA order (deterministic) and re-arms the counter (replays need no reset).
//
// Or (run_items = R > 0) the items are cut into runs of R, dealt round-robin
// (CTA i: runs i, i + P, ...), so that at any moment the CTAs read one window of
// the matrix that sweeps it front to back (the access order of a grid-stride
// stream) instead of P separate places; segments are then (group, run) pieces.
//
// PDL: every CTA lets the next kernel launch at once; the producer issues the
// first kStages weight copies, then griddepcontrol.wait, then the activation
// copies; consumers touch ws / y only after their own griddepcontrol.wait.
//
// Roles (as in the other decode kernels): weights = MMA A (16 channels per
// tile), x = MMA B (MT tiles of 8 rows; rows >= M read row M-1, never stored).
// Consumer warp w owns tiles w*TM .. w*TM+TM-1 of each group.
//
// Limits: N % 16 == 0, K % 64 == 0 (K % 128 == 0 if G == 128), M <= 8*MT;
// 16-byte aligned pointers; one launch per workspace at a time; dynamic shared
// memory StreamShape<WF, MT, TM>::kSmem (src/launch/w4a16.cu checks all of
// this).
// Test: dev/tests/w4a16_dev_test.cpp. Bench: bench/w4a16_bench.cpp (its --sweep).
#pragma once

#include "dev/kernels/sm90_w4a16_stream_k.cuh"
#include "kernels/ptx/fence.cuh"
#include "kernels/ptx/mbarrier.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/ptx/tma.cuh"

namespace futr::device {

template <class WF, int MT, int TM>
struct StreamShape {
  static constexpr int kConsumerWarps = layout::kTileGroup / TM;
  static constexpr int kThreads = 32 * (kConsumerWarps + 1);
  static constexpr int kStageW = 2 * layout::kTileGroup * WF::kChunkBytes;  // one item's weights
  // Group scales of the item: 8 tiles x (128 / G) groups x 16 FP16.
  static constexpr int kTileScaleBytes = WF::kGroupScales ? 32 * (layout::kBlockK / WF::kGroup) : 0;
  static constexpr int kStageS = layout::kTileGroup * kTileScaleBytes;
  // Activations: a row's 128 BF16 (256 B) + 16 B of padding, so that the 8
  // rows a quarter-warp reads fall in different banks.
  static constexpr int kXRowBytes = 2 * layout::kChunkK * 2 + 16;
  static constexpr int kStageX = 8 * MT * kXRowBytes;
  static constexpr int kStageBytes = kStageW + kStageS + kStageX;
  static constexpr int kStages =
      65536 / kStageBytes < 2 ? 2 : (65536 / kStageBytes > 8 ? 8 : 65536 / kStageBytes);
  static constexpr size_t kSmem = size_t(kStages) * kStageBytes + 2 * kStages * sizeof(uint64_t) + 16;
  static_assert(kStageBytes % 16 == 0, "stages must stay 16-byte aligned for cp.async.bulk");
};

// The items of one CTA, run by run: run index (stream-K: the CTA; round-robin:
// its runs i, i + P, ...), the current item and the end of its run.
struct StreamCursor {
  int run, t, end;
  bool done;
  __device__ __forceinline__ StreamCursor(int total, int run_items) {
    if (run_items == 0) {
      run = blockIdx.x;
      t = stream_first(blockIdx.x, total, gridDim.x);
      end = stream_first(blockIdx.x + 1, total, gridDim.x);
    } else {
      run = blockIdx.x;
      t = run * run_items;
      end = min(total, t + run_items);
    }
    done = t >= end;
  }
  __device__ __forceinline__ void next(int total, int run_items) {
    if (++t < end) return;
    if (run_items == 0) {
      done = true;
      return;
    }
    run += gridDim.x;
    t = run * run_items;
    end = min(total, t + run_items);
    done = t >= end;
  }
};
// The run (ws segment base) that holds item t.
__device__ __forceinline__ int run_of(int t, int total, int run_items) {
  return run_items == 0 ? stream_owner(t, total, gridDim.x) : t / run_items;
}

template <class WF, int MT, int TM>
__global__ void __launch_bounds__(StreamShape<WF, MT, TM>::kThreads, MT == 1 ? 3 : 2)
    sm90_w4a16_stream_kernel(const DecodeParams p) {
  static_assert(MT == 1 || MT == 2 || MT == 4, "MT row tiles of 8: 1, 2 or 4");
  static_assert(TM == 1 || TM == 2, "TM weight tiles of 16 channels per warp: 1 or 2");
  using Sh = StreamShape<WF, MT, TM>;
  constexpr int kS = Sh::kStages;
  constexpr int kW = WF::kWords;
  constexpr int kPieces = kW / 4;  // 16-byte pieces per lane, tile and chunk
  constexpr bool kBiased = WF::kGroupScales && MT <= 2;

  extern __shared__ __align__(128) uint8_t stream_smem[];
  uint8_t* const smem = stream_smem;
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + size_t(kS) * Sh::kStageBytes);
  uint64_t* const empty = full + kS;
  uint32_t* const s_last = reinterpret_cast<uint32_t*>(empty + kS);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int ntiles = p.n / layout::kTileN;
  const int nchunks = p.k / layout::kChunkK;
  const int nblk = (nchunks + 1) / 2;
  const int ngroups = (ntiles + layout::kTileGroup - 1) / layout::kTileGroup;
  const int total = ngroups * nblk;
  const int R = p.run_items;

  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < kS; ++s) {
      ptx::mbarrier_init(&full[s], WF::kGroupScales ? 1 + 32 : 1);
      ptx::mbarrier_init(&empty[s], Sh::kConsumerWarps);
    }
    ptx::fence_mbarrier_init_release_cluster();
  }
  __syncthreads();
  ptx::griddep_launch_dependents();

  // ---- producer warp -----------------------------------------------------------
  if (warp == Sh::kConsumerWarps) {
    // Weights + scales of item j (grp, blk) into slot; lane 0 announces all of
    // the stage's bulk bytes (weights and activations) first.
    auto issue_weights = [&](int slot, int grp, int blk) {
      const int gt = min(layout::kTileGroup, ntiles - grp * layout::kTileGroup);
      const int nch = min(2, nchunks - 2 * blk);
      uint8_t* const stage = smem + size_t(slot) * Sh::kStageBytes;
      const uint32_t wbytes = uint32_t(nch * gt * WF::kChunkBytes);
      const uint32_t xbytes = (p.probe & 2) ? 0u : uint32_t(p.m * nch * 128);
      if (lane == 0) ptx::mbarrier_arrive_expect_tx(&full[slot], wbytes + xbytes);
      __syncwarp();
      if (lane == 0)
        ptx::cp_async_bulk_g2s(
            stage,
            p.w + layout::tile_chunk_offset(ntiles, p.k, WF::kChunkBytes, grp * layout::kTileGroup, 2 * blk),
            wbytes, &full[slot]);
      if constexpr (WF::kGroupScales) {
        // Tile r's scales of this block: 16 FP16 per group, nch*64/G groups, contiguous.
        const int pieces = nch * layout::kChunkK / WF::kGroup * 2;  // 16-byte pieces per tile
        if (lane < gt * pieces && !(p.probe & 1)) {
          const int r = lane / pieces, q = lane % pieces;
          const int tile = grp * layout::kTileGroup + r;
          const uint16_t* src =
              static_cast<const uint16_t*>(p.scales) +
              (size_t(tile) * (p.k / WF::kGroup) + size_t(blk) * (layout::kBlockK / WF::kGroup)) *
                  layout::kTileN +
              8 * q;
          ptx::cp_async_16_cg(stage + Sh::kStageW + r * Sh::kTileScaleBytes + 16 * q, src);
        }
        ptx::cp_async_mbarrier_arrive_noinc(&full[slot]);
      }
    };
    auto issue_x = [&](int slot, int blk) {  // one bulk copy per row of x (lane r: row r)
      const int nch = min(2, nchunks - 2 * blk);
      uint8_t* const xs = smem + size_t(slot) * Sh::kStageBytes + Sh::kStageW + Sh::kStageS;
      if (lane < p.m && !(p.probe & 2))
        ptx::cp_async_bulk_g2s(xs + lane * Sh::kXRowBytes,
                               p.x + size_t(lane) * p.k + size_t(blk) * layout::kBlockK, uint32_t(nch * 128),
                               &full[slot]);
    };
    // The first kS items: weights now, activations after griddepcontrol.wait.
    StreamCursor cur(total, R);
    int nfirst = 0;
#pragma unroll 1
    for (; nfirst < kS && !cur.done; ++nfirst, cur.next(total, R))
      issue_weights(nfirst, cur.t / nblk, cur.t % nblk);
    ptx::griddep_wait();  // x is the previous kernel's output
    {
      StreamCursor c2(total, R);
#pragma unroll 1
      for (int j = 0; j < nfirst; ++j, c2.next(total, R)) issue_x(j, c2.t % nblk);
    }
    int slot = 0;
    uint32_t phase = 0;
#pragma unroll 1
    for (; !cur.done; cur.next(total, R)) {
      ptx::mbarrier_wait_parity(&empty[slot], phase);
      issue_weights(slot, cur.t / nblk, cur.t % nblk);
      issue_x(slot, cur.t % nblk);
      if (++slot == kS) slot = 0, phase ^= 1;
    }
    ptx::cp_async_wait<0>();
    return;
  }

  // ---- consumer warps ------------------------------------------------------------
  const int g = lane / 4, c = lane % 4;
  constexpr int kCThreads = 32 * Sh::kConsumerWarps;
  ptx::griddep_wait();  // ws, counters and y may belong to the previous kernel until here
  int xoff[MT];         // this lane's activation row in a stage (rows >= M read row M-1)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xoff[mt] = min(8 * mt + g, p.m - 1) * Sh::kXRowBytes + 32 * c;
  constexpr uint32_t kOnes[4] = {layout::kBf16x2One, layout::kBf16x2One, layout::kBf16x2One,
                                 layout::kBf16x2One};

  float acc[TM][MT][4], blk_acc[TM][MT][4], sx[MT][4];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[tm][mt][i] = 0.f;

  // One chunk u of the stage: MMAs into blk_acc (and sx), scales at a group's end.
  auto chunk = [&](const uint8_t* stage, int u, int gt, bool last_of_stage) {
    uint32_t w[TM][kW];
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) {
      const int r = min(warp * TM + tm, gt - 1);  // tiles past the group's end re-read its last
#pragma unroll
      for (int q = 0; q < kPieces; ++q) {
        const uint4 v = *reinterpret_cast<const uint4*>(stage + (u * gt + r) * WF::kChunkBytes +
                                                        q * layout::kE4M3PartBytes + lane * 16);
        w[tm][4 * q] = v.x, w[tm][4 * q + 1] = v.y, w[tm][4 * q + 2] = v.z, w[tm][4 * q + 3] = v.w;
      }
    }
    const uint8_t* const xs = stage + Sh::kStageW + Sh::kStageS + u * 128;
    uint4 xq[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      xq[mt][0] = *reinterpret_cast<const uint4*>(xs + xoff[mt]);
      xq[mt][1] = *reinterpret_cast<const uint4*>(xs + xoff[mt] + 16);
    }
    const bool start = WF::group_start(u);
#pragma unroll
    for (int i = 0; i < layout::kStepsPerChunk; ++i) {
      uint32_t b[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint4& q = xq[mt][i / 2];
        b[mt][0] = i % 2 == 0 ? q.x : q.z;
        b[mt][1] = i % 2 == 0 ? q.y : q.w;
      }
#pragma unroll
      for (int tm = 0; tm < TM; ++tm) {
        uint32_t a[4];
        if constexpr (kBiased) layout::int4x8_to_bf16_biased(w[tm][i], a);
        else WF::step(w[tm], i, a);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (WF::kGroupScales) {
            if (i == 0 && start) ptx::mma_m16n8k16_bf16_zc(blk_acc[tm][mt], a, b[mt]);
            else ptx::mma_m16n8k16_bf16(blk_acc[tm][mt], a, b[mt]);
          } else {
            ptx::mma_m16n8k16_bf16(acc[tm][mt], a, b[mt]);
          }
        }
      }
      if constexpr (kBiased) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (i == 0 && start) ptx::mma_m16n8k16_bf16_zc(sx[mt], kOnes, b[mt]);
          else ptx::mma_m16n8k16_bf16(sx[mt], kOnes, b[mt]);
        }
      }
    }
    if constexpr (WF::kGroupScales) {
      if (WF::group_end(u) || last_of_stage) {
#pragma unroll
        for (int tm = 0; tm < TM; ++tm) {
          const int r = min(warp * TM + tm, gt - 1);
          const uint32_t sv =
              *reinterpret_cast<const uint32_t*>(stage + Sh::kStageW + r * Sh::kTileScaleBytes +
                                                 (u * layout::kChunkK / WF::kGroup) * 32 + 4 * g);
          const float2 s = __half22float2(*reinterpret_cast<const __half2*>(&sv));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float v =
                  kBiased ? fmaf(-layout::kInt4Bias, sx[mt][e], blk_acc[tm][mt][e]) : blk_acc[tm][mt][e];
              acc[tm][mt][e] = fmaf(e < 2 ? s.x : s.y, v, acc[tm][mt][e]);
            }
        }
      }
    }
  };

  StreamCursor cur(total, R);
  int grp = cur.t / nblk, blk = cur.t % nblk, first_blk = blk, seg_run = cur.run;
  int slot = 0;
  uint32_t phase = 0;
#pragma unroll 1
  while (!cur.done) {
    const int gt = min(layout::kTileGroup, ntiles - grp * layout::kTileGroup);
    const uint8_t* const stage = smem + size_t(slot) * Sh::kStageBytes;
    ptx::mbarrier_wait_parity(&full[slot], phase);
    if (p.probe & 4) {
    } else if (2 * blk + 2 <= nchunks) {  // the common case: both chunks, one straight-line body
      chunk(stage, 0, gt, false);
      chunk(stage, 1, gt, true);
    } else {  // a K tail of 64 (G = 64 only)
      chunk(stage, 0, gt, true);
    }
    // The stage's shared memory has been read into registers and consumed above;
    // NOTE: the proxy fence orders these generic reads before the producer's
    // next bulk copy (async proxy) into the slot.
    ptx::fence_proxy_async_shared_cta();
    __syncwarp();
    if (lane == 0) ptx::mbarrier_arrive(&empty[slot]);
    if (++slot == kS) slot = 0, phase ^= 1;

    // ---- segment end: the group's last block or the CTA's last item -------------
    const int this_grp = grp, this_first = first_blk, this_blk = blk, this_run = seg_run;
    const int prev_run = cur.run;
    cur.next(total, R);
    if (!cur.done && cur.run != prev_run) {  // a new run: jump
      grp = cur.t / nblk, blk = cur.t % nblk;
    } else if (++blk == nblk) {
      blk = 0, ++grp;
    }
    const bool seg_end = this_blk + 1 == nblk || cur.done || cur.run != prev_run;
    if (!seg_end) continue;
    first_blk = blk, seg_run = cur.run;
    segment_store<WF, MT, TM>(
        p, acc, this_grp, gt, warp * TM, this_first == 0 && this_blk + 1 == nblk, this_grp + this_run,
        run_of(this_grp * nblk, total, R), run_of(this_grp * nblk + nblk - 1, total, R), s_last,
        [] { ptx::bar_sync(1, kCThreads); }, kCThreads, g, c);
  }
}

}  // namespace futr::device
