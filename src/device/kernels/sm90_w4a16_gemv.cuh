// sm90_w4a16_gemv: y[1,N] = x[1,K] * W[N,K]^T for ONE query row (batch-1 decode),
// W symmetric INT4 with FP16 group scales (G = 128 or 64), x and y BF16.
//
//   y[n] = sum_g s[n,g] * sum_{k in group g} x[k] * q[n,k]      (FP32 accumulation)
//
// Memory-bound: the weights are read exactly once (0.5 byte per weight, plus
// 2 bytes per G weights of scales); x (2K bytes) stays in L1. Nothing of W is
// staged in shared memory: each lane streams its 16-byte fragments straight into
// registers through a ring of U blocks x TN tiles (U*TN independent 16-byte
// loads in flight per lane) and dequantizes them into mma.sync.m16n8k16 B
// operands (layout/int4_fragment.cuh; policies in sm90_w4a16_common.cuh).
//
// Work split. A CTA of 8 warps owns 8*TN n8 tiles (warp w: tiles w, w+8, ...) and
// a K slice (split-K over gridDim.y, reduced by the last CTA of each column in
// store_output: no second pass). x is the A operand: every lane loads the same
// 16 activations as its quad-mates (a broadcast), so all 16 rows of A hold x and
// only row 0 of C is kept; no predicates, and one x fragment feeds TN tiles.
// The loop is unrolled by U so ring slots are registers with constant indices,
// and all pointers advance by constant strides (docs/PERF.md: the first versions
// spent 60% of their instructions on address arithmetic and were issue-bound).
//
// Limits: N % 8 == 0, K % 64 == 0, K % 128 == 0 if G == 128; 16-byte aligned
// pointers (checked by the launcher, src/cuda/w4a16.cu).
// Test: tests/device/w4a16_test.cpp. Benchmark: bench/w4a16_bench.cpp.
#pragma once

#include "device/kernels/sm90_w4a16_common.cuh"
#include "device/ptx/mma.cuh"

namespace futr::device {

template <int G, int TN, int U>
__global__ void __launch_bounds__(256, 2) sm90_w4a16_gemv_kernel(const DecodeParams p) {
  static_assert(G == 64 || G == 128, "group size must be 64 or 128");
  static_assert(TN == 1 || TN == 2 || TN == 4, "TN n8 tiles per warp: 1, 2 or 4");
  static_assert(U >= 2 && U <= 8, "ring depth: 2..8 blocks");
  using WF = Int4Format<G>;
  using Scale = typename WF::Scale;
  constexpr int kWarps = 8;

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
  const uint8_t* wt[TN];
  const uint8_t* wnext[TN];   // this lane's next block to load
  const uint16_t* snext[TN];  // its scales
#pragma unroll
  for (int t = 0; t < TN; ++t) {
    tile[t] = blockIdx.x * kWarps * TN + t * kWarps + warp;
    tok[t] = tile[t] < ntiles;
    const int tt = tok[t] ? tile[t] : 0;  // out-of-range tiles re-read tile 0; never stored
    wt[t] = p.w + size_t(tt) * WF::tile_bytes(p.k);
    wnext[t] = WF::lane_ptr(wt[t], kb0, lane);
    snext[t] = WF::scale_ptr(p.scales, p.k, tt, kb0, c);
  }
  // x[kb*128 + 64h + 16c + 8*i2 + 0..7] = xp[16*(kb - kb0) + 8h + i2] (same for all g).
  const uint4* const xp = reinterpret_cast<const uint4*>(p.x + size_t(kb0) * layout::kBlockK + 16 * c);

  float acc[TN][1][4];
#pragma unroll
  for (int t = 0; t < TN; ++t) acc[t][0][0] = acc[t][0][1] = acc[t][0][2] = acc[t][0][3] = 0.f;

  // One block: both halves, or half 0 of a tail block.
  auto block = [&](const uint32_t (&w)[TN][4], const Scale (&sv)[TN], int xoff, bool tail) {
    float blk[TN][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && tail) break;
      const uint4 xa = ptx::ld_cached_v4(xp + xoff + 8 * h);      // steps 4h, 4h+1
      const uint4 xb = ptx::ld_cached_v4(xp + xoff + 8 * h + 1);  // steps 4h+2, 4h+3
#pragma unroll
      for (int i2 = 0; i2 < 2; ++i2) {
        const uint4& xq = i2 == 0 ? xa : xb;
        const uint32_t a0[4] = {xq.x, xq.x, xq.y, xq.y};  // rows g and g+8 both hold x
        const uint32_t a1[4] = {xq.z, xq.z, xq.w, xq.w};
#pragma unroll
        for (int t = 0; t < TN; ++t) {
          uint32_t b[4];
          layout::int4x8_to_bf16(w[t][2 * h + i2], b);
          const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          if (i2 == 0 && (h == 0 || G == 64)) ptx::mma_m16n8k16_bf16_zc(blk[t], a0, b0);
          else ptx::mma_m16n8k16_bf16(blk[t], a0, b0);
          ptx::mma_m16n8k16_bf16(blk[t], a1, b1);
        }
      }
      if (G == 64 || h == 1 || tail) {  // FP32 group scaling (row 0: d[0], d[1])
#pragma unroll
        for (int t = 0; t < TN; ++t) {
          const uint32_t s2 = WF::half_scale(sv[t], h);
          const float2 s = __half22float2(*reinterpret_cast<const __half2*>(&s2));
          acc[t][0][0] = fmaf(s.x, blk[t][0], acc[t][0][0]);
          acc[t][0][1] = fmaf(s.y, blk[t][1], acc[t][0][1]);
        }
      }
    }
  };

  // ---- main loop: a register ring of U blocks x TN tiles ---------------------
  uint32_t wr[U][TN][4];
  Scale sr[U][TN];
  auto fill = [&](int u) {
#pragma unroll
    for (int t = 0; t < TN; ++t) {
      WF::load(wnext[t], wr[u][t]);
      sr[u][t] = WF::load_scale(snext[t]);
      wnext[t] += WF::kBlockBytes;
      snext[t] += WF::kScaleStride;
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nj) fill(u);
  int xoff = 0;
  for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u < nj) {
        uint32_t w[TN][4];
        Scale sv[TN];
#pragma unroll
        for (int t = 0; t < TN; ++t) {
          w[t][0] = wr[u][t][0], w[t][1] = wr[u][t][1], w[t][2] = wr[u][t][2], w[t][3] = wr[u][t][3];
          sv[t] = sr[u][t];
        }
        if (j0 + u + U < nj) fill(u);  // refill first: U blocks stay in flight
        block(w, sv, xoff, false);
        xoff += layout::kBlockK / 8;
      }
    }
  }

  if (tail_here) {  // the 64-wide K tail (G == 64 only; the launcher checks)
    uint32_t w[TN][4];
    Scale sv[TN];
#pragma unroll
    for (int t = 0; t < TN; ++t) {
      WF::load_tail(wt[t], nfull, lane, w[t]);
      sv[t] = WF::load_tail_scale(p.scales, p.k, tok[t] ? tile[t] : 0, nfull, c);
    }
    block(w, sv, (nfull - kb0) * (layout::kBlockK / 8), true);
  }

  store_output<WF, 1, TN>(p, acc, tile, tok, g, c);
}

}  // namespace futr::device
