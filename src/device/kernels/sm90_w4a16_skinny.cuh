// sm90_w4a16_skinny: y[M,N] = x[M,K] * W[N,K]^T for 2 <= M <= 32 query rows
// (batched decode), W in a packed weight format WF, x and y BF16, FP32 accumulation.
//
//   WF = Int4Format<G>: W[n,k] = q[n,k] * s[n, k/G] (INT4, FP16 group scales
//        applied to each group's FP32 partial sum after accumulation);
//   WF = E4M3Format:    W[n,k] = e4m3[n,k] * s[n]   (the W8A16 comparison path:
//        same kernel, a different dequantizer and one FP32 scale per channel).
//   (policies and the split-K epilogue: sm90_w4a16_common.cuh)
//
// Work split. A CTA of 8 warps owns 8*TN n8 tiles (warp w: tiles w, w+8, ...,
// so the 8 warps read neighbouring tiles) and one K slice of kb_per_split k128
// blocks (split-K over gridDim.y; the last CTA of a column reduces, no second
// pass). Each lane streams its own weight fragments through a lane-private ring
// in shared memory: cp.async copies of the next WF::kStages blocks are in flight
// while the lane computes (a lane reads back only what it copied itself, so
// cp.async.wait_group orders it and no barrier is needed; a register ring that
// deep would not fit in 128 registers). Activation fragments come from global
// memory (shared by all warps of the CTA: L1 serves them after the first warp).
// Per k16 step a warp runs MT*TN mma.sync.m16n8k16: the rows of x are the MMA's
// M (MT tiles of 16 rows), the weights its B operand.
//
// The hot loop is written for few instructions per block (docs/PERF.md: a first
// version spent ~150 instructions per 1024 weights, 60% of them address
// arithmetic, and was issue-bound at ~35% of the copy bandwidth): ring slots are
// compile-time (the loop is unrolled by the ring depth), all pointers advance by
// constant strides, rows >= M read row M-1 (their results are discarded, so no
// predicates or zeroing), and each group's sum starts with a C = 0 MMA.
//
// Limits: 1 <= M <= 16*MT, N % 8 == 0, K % 64 == 0 (K % 128 == 0 if G == 128),
// 16-byte aligned pointers; one launch per workspace at a time; dynamic shared
// memory skinny_smem_bytes<WF, TN>() (src/cuda/w4a16.cu checks and sets all of this).
// Test: tests/device/w4a16_test.cpp. Bench: bench/w4a16_bench.cpp.
#pragma once

#include "device/kernels/sm90_w4a16_common.cuh"
#include "device/ptx/mma.cuh"

namespace futr::device {

// Dynamic shared memory of one CTA: the lane-private rings of weights (and scales).
template <class WF, int TN>
constexpr size_t skinny_smem_bytes() {
  return size_t(WF::kStages) * TN * 256 * (WF::kWords * 4 + (WF::kGroupScales ? 8 : 0));
}

template <class WF, int MT, int TN>
__global__ void __launch_bounds__(256, 2) sm90_w4a16_skinny_kernel(const DecodeParams p) {
  static_assert(MT == 1 || MT == 2, "MT m16 tiles: 1 (M <= 16) or 2 (M <= 32)");
  static_assert(TN == 1 || TN == 2 || TN == 4, "TN n8 tiles per warp: 1, 2 or 4");
  constexpr int kWarps = 8;
  constexpr int kW = WF::kWords;
  constexpr int kS = WF::kStages;
  constexpr int kChunks = kW / 4;  // 16-byte chunks per lane per tile and block
  using Scale = typename WF::Scale;

  // ---- indices ------------------------------------------------------------
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int ntiles = p.n / layout::kTileN;
  const int nfull = p.k / layout::kBlockK;
  const bool has_tail = p.k % layout::kBlockK != 0;
  const int nblk = nfull + (has_tail ? 1 : 0);
  const int kb0 = blockIdx.y * p.kb_per_split;
  const int kb1 = min(nblk, kb0 + p.kb_per_split);
  const int nj = max(0, min(kb1, nfull) - kb0);  // full blocks of this split
  const bool tail_here = has_tail && kb1 > nfull && kb0 <= nfull;

  int tile[TN];
  bool tok[TN];
  const uint8_t* wt[TN];     // tile base
  const uint8_t* wnext[TN];  // this lane's next block to copy
  const uint16_t* snext[TN]; // its scales
#pragma unroll
  for (int t = 0; t < TN; ++t) {
    tile[t] = blockIdx.x * kWarps * TN + t * kWarps + warp;
    tok[t] = tile[t] < ntiles;
    const int tt = tok[t] ? tile[t] : 0;  // out-of-range tiles re-read tile 0; never stored
    wt[t] = p.w + size_t(tt) * WF::tile_bytes(p.k);
    wnext[t] = WF::lane_ptr(wt[t], kb0, lane);
    snext[t] = WF::scale_ptr(p.scales, p.k, tt, kb0, c);
  }
  // Activation rows of this lane: 16mt + g and 16mt + g + 8 (rows >= M read M-1).
  const uint4* xrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = min(16 * mt + 8 * r + g, p.m - 1);
      xrow[mt][r] = reinterpret_cast<const uint4*>(p.x + size_t(row) * p.k + size_t(kb0) * layout::kBlockK + 16 * c);
    }

  float acc[TN][MT][4];
#pragma unroll
  for (int t = 0; t < TN; ++t)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) acc[t][mt][0] = acc[t][mt][1] = acc[t][mt][2] = acc[t][mt][3] = 0.f;

  // One block (both halves, or half 0 of a tail block). xb: this block's
  // activations (uint4 units, 16 per row and block).
  auto block = [&](const uint32_t (&w)[TN][kW], const Scale (&sv)[TN], int xoff, bool tail) {
    float blk[TN][MT][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && tail) break;
      // x[row][64h + 16c + 8*i2 + 0..7] for i2 = 0, 1 (uint4 offsets 8h + i2).
      uint4 xq[2][MT][2];
#pragma unroll
      for (int i2 = 0; i2 < 2; ++i2)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) xq[i2][mt][r] = ptx::ld_cached_v4(xrow[mt][r] + xoff + 8 * h + i2);
#pragma unroll
      for (int i2 = 0; i2 < 2; ++i2) {  // steps 4h + 2*i2 and 4h + 2*i2 + 1
#pragma unroll
        for (int t = 0; t < TN; ++t) {
          uint32_t b[4];
          WF::steps(w[t], 2 * h + i2, b);
          const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint4& r0 = xq[i2][mt][0];
            const uint4& r1 = xq[i2][mt][1];
            const uint32_t a0[4] = {r0.x, r1.x, r0.y, r1.y};
            const uint32_t a1[4] = {r0.z, r1.z, r0.w, r1.w};
            if constexpr (WF::kGroupScales) {
              // A group (64 or 128 inputs) starts with a C = 0 MMA.
              if (i2 == 0 && (h == 0 || WF::kGroup == 64)) ptx::mma_m16n8k16_bf16_zc(blk[t][mt], a0, b0);
              else ptx::mma_m16n8k16_bf16(blk[t][mt], a0, b0);
              ptx::mma_m16n8k16_bf16(blk[t][mt], a1, b1);
            } else {
              ptx::mma_m16n8k16_bf16(acc[t][mt], a0, b0);
              ptx::mma_m16n8k16_bf16(acc[t][mt], a1, b1);
            }
          }
        }
      }
      // FP32 group scaling after accumulation (channels 2c, 2c+1).
      if constexpr (WF::kGroupScales) {
        if (WF::kGroup == 64 || h == 1 || tail) {
#pragma unroll
          for (int t = 0; t < TN; ++t) {
            const uint32_t s2 = WF::half_scale(sv[t], h);
            const float2 s = __half22float2(*reinterpret_cast<const __half2*>(&s2));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              acc[t][mt][0] = fmaf(s.x, blk[t][mt][0], acc[t][mt][0]);
              acc[t][mt][1] = fmaf(s.y, blk[t][mt][1], acc[t][mt][1]);
              acc[t][mt][2] = fmaf(s.x, blk[t][mt][2], acc[t][mt][2]);
              acc[t][mt][3] = fmaf(s.y, blk[t][mt][3], acc[t][mt][3]);
            }
          }
        }
      }
    }
  };

  // ---- shared memory: lane-private cp.async ring [kS][TN][kChunks][256] -----
  extern __shared__ uint4 smem[];
  uint4* const wring = smem + threadIdx.x;
  uint2* const sring = reinterpret_cast<uint2*>(smem + kS * TN * kChunks * 256) + threadIdx.x;
  auto fill = [&](int st) {  // copies the next block into slot st; one commit group
#pragma unroll
    for (int t = 0; t < TN; ++t) {
      WF::issue(wnext[t], wring + (st * TN + t) * kChunks * 256);
      if constexpr (WF::kGroupScales) WF::issue_scale(snext[t], sring + (st * TN + t) * 256);
      wnext[t] += WF::kBlockBytes;
      snext[t] += WF::kScaleStride;
    }
    ptx::cp_async_commit();
  };

  // ---- main loop: kS blocks in flight; unrolled by kS so slots are constants --
#pragma unroll
  for (int st = 0; st < kS; ++st) {
    if (st < nj) fill(st);
    else ptx::cp_async_commit();  // empty group: keeps the group count uniform
  }
  int xoff = 0;  // uint4 offset of the current block in the activation rows
  for (int j0 = 0; j0 < nj; j0 += kS) {
#pragma unroll
    for (int st = 0; st < kS; ++st) {
      if (j0 + st < nj) {
        ptx::cp_async_wait<kS - 1>();  // this lane's copies of block j0 + st have landed
        uint32_t w[TN][kW];
        Scale sv[TN];
#pragma unroll
        for (int t = 0; t < TN; ++t) {
#pragma unroll
          for (int ch = 0; ch < kChunks; ++ch) {
            const uint4 v = wring[((st * TN + t) * kChunks + ch) * 256];
            w[t][4 * ch] = v.x, w[t][4 * ch + 1] = v.y, w[t][4 * ch + 2] = v.z, w[t][4 * ch + 3] = v.w;
          }
          if constexpr (WF::kGroupScales) sv[t] = WF::scale_from(sring[(st * TN + t) * 256]);
          else sv[t] = Scale{};
        }
        block(w, sv, xoff, false);
        xoff += layout::kBlockK / 8;
        // NOTE: the slot is refilled only after block() consumed its registers:
        // in-order issue then guarantees the shared-memory reads above completed.
        if (j0 + st + kS < nj) fill(st);
        else ptx::cp_async_commit();
      }
    }
  }
  ptx::cp_async_wait<0>();

  if (tail_here) {  // the 64-wide K tail (INT4 needs G == 64 for it; the launcher checks)
    uint32_t w[TN][kW];
    Scale sv[TN];
#pragma unroll
    for (int t = 0; t < TN; ++t) {
      WF::load_tail(wt[t], nfull, lane, w[t]);
      sv[t] = WF::load_tail_scale(p.scales, p.k, tok[t] ? tile[t] : 0, nfull, c);
    }
    block(w, sv, (nfull - kb0) * (layout::kBlockK / 8), true);
  }

  store_output<WF, MT, TN>(p, acc, tile, tok, g, c);
}

}  // namespace futr::device
