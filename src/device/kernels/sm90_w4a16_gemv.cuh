// sm90_w4a16_gemv: y[1,N] = x[1,K] * W[N,K]^T for ONE query row (batch-1 decode),
// W symmetric INT4 with FP16 group scales (G = 128 or 64), x and y BF16.
//
//   y[n] = sum_g s[n,g] * sum_{k in group g} x[k] * (q[n,k])      (FP32 accumulation)
//
// Memory-bound: the weights are read exactly once (0.5 byte per weight, plus
// 2 bytes per G weights of scales); x (2K bytes) stays in L1. Nothing of W is
// staged in shared memory: each lane streams its 16-byte fragments straight into
// registers, U loads in flight per lane (a register ring), and dequantizes them
// into mma.sync.m16n8k16 B operands (layout/int4_fragment.cuh).
//
// Work split. A CTA of 8 warps owns TILES = 8 / KSPLIT n8 tiles over the whole
// K; the KSPLIT warps of a tile take its k128 blocks round-robin (warp kw reads
// blocks kw, kw + KSPLIT, ...: the CTA's warps read adjacent 512-byte chunks), so
// no partial sum leaves the CTA; a shared-memory reduction of 8 floats per warp
// ends the kernel. x is the A operand, row 0 only (lanes 0..3 load it; rows
// 1..15 are zeros): a 16x8x16 MMA per 128 weights costs less issue bandwidth than
// FMA-based dot products.
//
// Limits: N % 8 == 0, K % 64 == 0, K % 128 == 0 if G == 128; 16-byte aligned
// pointers (checked by the launcher, src/cuda/w4a16.cu).
// Test: tests/device/w4a16_test.cu. Benchmark: bench/w4a16_bench.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device/layout/int4_fragment.cuh"
#include "device/ptx/ld.cuh"
#include "device/ptx/mma.cuh"

namespace futr::device {

struct W4GemvParams {
  const uint8_t* w;        // [N/8 tiles][K/128 blocks][32 lanes][16 B] INT4, fragment order
  const uint16_t* scales;  // [N/8][K/G][8] FP16 bits, fragment order
  const __nv_bfloat16* x;  // [K]
  __nv_bfloat16* y;        // [N]
  int n;                   // output channels N
  int k;                   // inputs K
};

template <int G, int KSPLIT, int U>
__global__ void __launch_bounds__(256) sm90_w4a16_gemv_kernel(const W4GemvParams p) {
  static_assert(G == 64 || G == 128, "group size must be 64 or 128");
  static_assert(KSPLIT == 2 || KSPLIT == 4 || KSPLIT == 8, "KSPLIT must divide the 8 warps");
  static_assert(U >= 2 && U <= 8, "loads in flight per lane: 2..8");
  constexpr int kWarps = 8;
  constexpr int kTiles = kWarps / KSPLIT;
  // Scale bytes per lane per full block: G=128 -> one half2 (channels 2c, 2c+1),
  // G=64 -> two (halves h = 0, 1).
  using ScaleT = std::conditional_t<G == 128, uint32_t, uint2>;
  constexpr int kScaleBlockElems = (layout::kBlockK / G) * layout::kTileN;

  // ---- indices ------------------------------------------------------------
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int tile = blockIdx.x * kTiles + warp / KSPLIT;
  const int kw = warp % KSPLIT;
  const int ntiles = p.n / layout::kTileN;
  const int nfull = p.k / layout::kBlockK;        // full 128-blocks
  const bool has_tail = p.k % layout::kBlockK != 0;  // a trailing 64-half block
  const bool tile_ok = tile < ntiles;
  // Blocks kw, kw + KSPLIT, ... < nfull belong to this warp.
  const int nj = tile_ok && kw < nfull ? (nfull - kw + KSPLIT - 1) / KSPLIT : 0;

  const uint8_t* wt = p.w + size_t(tile_ok ? tile : 0) * (size_t(p.k) / 2) * layout::kTileN;
  const uint16_t* st = p.scales + size_t(tile_ok ? tile : 0) * (size_t(p.k) / G) * layout::kTileN;
  const bool xlane = g == 0;  // lanes holding row 0 of A

  auto load_w = [&](int kb) { return ptx::ld_stream_v4(wt + size_t(kb) * layout::kInt4BlockBytes + lane * 16); };
  auto load_s = [&](int kb) -> ScaleT {
    const uint16_t* s = st + size_t(kb) * kScaleBlockElems;
    if constexpr (G == 128) return ptx::ld_cached_b32(s + 2 * c);
    else return ptx::ld_cached_v2(s + 4 * c);
  };

  float acc[2] = {0.f, 0.f};  // row 0, channels 2c, 2c+1 (lanes 0..3 meaningful)

  // One half block (4 mma steps): A from 16 activations, B from two INT4 words.
  auto half_mma = [&](float (&blk)[4], uint32_t w0, uint32_t w1, const uint4& xa, const uint4& xb) {
    uint32_t b[4];
    layout::int4x8_to_bf16(w0, b);  // steps 0, 1 of the half
    {
      const uint32_t a0[4] = {xa.x, 0u, xa.y, 0u}, a1[4] = {xa.z, 0u, xa.w, 0u};
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ptx::mma_m16n8k16_bf16(blk, a0, b0);
      ptx::mma_m16n8k16_bf16(blk, a1, b1);
    }
    layout::int4x8_to_bf16(w1, b);  // steps 2, 3
    {
      const uint32_t a0[4] = {xb.x, 0u, xb.y, 0u}, a1[4] = {xb.z, 0u, xb.w, 0u};
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ptx::mma_m16n8k16_bf16(blk, a0, b0);
      ptx::mma_m16n8k16_bf16(blk, a1, b1);
    }
  };
  // Activations of half h of block kb for lane c: x[kb*128 + 64h + 16c + 0..15].
  auto load_x = [&](int kb, int h, uint4& xa, uint4& xb) {
    if (xlane) {
      const __nv_bfloat16* px = p.x + size_t(kb) * layout::kBlockK + h * layout::kHalfK + 16 * c;
      xa = ptx::ld_cached_v4(px);
      xb = ptx::ld_cached_v4(px + 8);
    } else {
      xa = xb = make_uint4(0, 0, 0, 0);
    }
  };
  // FP32 group scaling after accumulation: acc += s * blk (row 0 only).
  auto apply = [&](const float (&blk)[4], uint32_t s2) {
    const float2 s = __half22float2(*reinterpret_cast<const __half2*>(&s2));
    acc[0] = fmaf(s.x, blk[0], acc[0]);
    acc[1] = fmaf(s.y, blk[1], acc[1]);
  };
  auto full_block = [&](int kb, const uint4& wv, const ScaleT& sv) {
    uint4 xa0, xb0, xa1, xb1;
    load_x(kb, 0, xa0, xb0);
    load_x(kb, 1, xa1, xb1);
    float blk[4] = {0.f, 0.f, 0.f, 0.f};
    half_mma(blk, wv.x, wv.y, xa0, xb0);
    if constexpr (G == 64) {
      apply(blk, sv.x);
      blk[0] = blk[1] = blk[2] = blk[3] = 0.f;
      half_mma(blk, wv.z, wv.w, xa1, xb1);
      apply(blk, sv.y);
    } else {
      half_mma(blk, wv.z, wv.w, xa1, xb1);
      apply(blk, sv);
    }
  };

  // ---- main loop: a ring of U weight fragments in flight per lane ----------
  uint4 wr[U];
  ScaleT sr[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (u < nj) {
      wr[u] = load_w(kw + u * KSPLIT);
      sr[u] = load_s(kw + u * KSPLIT);
    }
  }
  for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u;
      if (j < nj) {
        const uint4 wv = wr[u];
        const ScaleT sv = sr[u];
        if (j + U < nj) {  // refill the slot before computing: U loads stay in flight
          wr[u] = load_w(kw + (j + U) * KSPLIT);
          sr[u] = load_s(kw + (j + U) * KSPLIT);
        }
        full_block(kw + j * KSPLIT, wv, sv);
      }
    }
  }

  // ---- K tail: one half block of 64 (only with G == 64) --------------------
  if constexpr (G == 64) {
    if (has_tail && tile_ok && kw == nfull % KSPLIT) {
      const uint2 wv = ptx::ld_stream_v2(wt + size_t(nfull) * layout::kInt4BlockBytes + lane * 8);
      const uint32_t sv = ptx::ld_cached_b32(st + size_t(nfull) * kScaleBlockElems + 2 * c);
      uint4 xa, xb;
      load_x(nfull, 0, xa, xb);
      float blk[4] = {0.f, 0.f, 0.f, 0.f};
      half_mma(blk, wv.x, wv.y, xa, xb);
      apply(blk, sv);
    }
  }

  // ---- epilogue: reduce the KSPLIT warps of each tile, write BF16 ----------
  __shared__ float red[kTiles][KSPLIT][layout::kTileN];
  if (xlane) {
    red[warp / KSPLIT][kw][2 * c] = acc[0];
    red[warp / KSPLIT][kw][2 * c + 1] = acc[1];
  }
  __syncthreads();
  if (threadIdx.x < kTiles * layout::kTileN) {
    const int t = threadIdx.x / layout::kTileN, ch = threadIdx.x % layout::kTileN;
    const int otile = blockIdx.x * kTiles + t;
    if (otile < ntiles) {
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < KSPLIT; ++i) sum += red[t][i][ch];  // fixed order: deterministic
      p.y[size_t(otile) * layout::kTileN + ch] = __float2bfloat16_rn(sum);
    }
  }
}

}  // namespace futr::device
