// sm90_w4a16_skinny: y[M,N] = x[M,K] * W[N,K]^T for 2 <= M <= 32 query rows
// (batched decode), W in a packed weight format WF, x and y BF16, FP32 accumulation.
//
//   WF = Int4Format<G>: W[n,k] = q[n,k] * s[n, k/G] (INT4, FP16 group scales
//        applied to each group's FP32 partial sum after accumulation);
//   WF = E4M3Format:    W[n,k] = e4m3[n,k] * s[n]   (the W8A16 comparison path:
//        same kernel, a different dequantizer and one FP32 scale per channel).
//
// Work split. A CTA of 8 warps owns 8*TN n8 tiles (warp w: tiles w, w+8, ...,
// so the 8 warps read neighbouring tiles) and one K slice of kb_per_split k128
// blocks (split-K over gridDim.y). Each lane streams its weight fragments
// straight into registers (a PF-deep ring of TN fragments: PF*TN 16-byte loads
// in flight), reads its activation fragments from global memory (they are
// shared by all warps of the CTA, so L1 serves them after the first warp), and
// runs MT*TN mma.sync.m16n8k16 per k16 step: the rows of x are the MMA's M (MT
// tiles of 16 rows), the weights its B operand. Nothing is staged in shared
// memory.
//
// Split-K without a second pass: with splits > 1 each CTA writes its FP32 tile
// to ws[split][M][N] and bumps counters[blockIdx.x]; the CTA that arrives last
// sums the splits' partials in split order (deterministic) from L2, writes the
// BF16 result and re-arms the counter to 0 (so CUDA-graph replays need no reset).
//
// Limits: 1 <= M <= 16*MT, N % 8 == 0, K % 64 == 0 (K % 128 == 0 if G == 128),
// 16-byte aligned pointers; one launch per workspace at a time (src/cuda/w4a16.cu
// checks all of this). Test: tests/device/w4a16_test.cu. Bench: bench/w4a16_bench.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device/layout/int4_fragment.cuh"
#include "device/ptx/ld.cuh"
#include "device/ptx/mma.cuh"

namespace futr::device {

struct SkinnyParams {
  const uint8_t* w;        // packed weights, fragment order (WF)
  const void* scales;      // Int4: [N/8][K/G][8] FP16 fragment order; E4M3: [N] FP32
  const __nv_bfloat16* x;  // [M, K] row-major
  __nv_bfloat16* y;        // [M, N] row-major
  float* ws;               // [splits, M, N] FP32 partials (splits > 1 only)
  uint32_t* counters;      // [gridDim.x] arrival counters, all 0 between launches
  int m, n, k;             // rows, output channels, inputs
  int kb_per_split;        // k128 blocks per split (the last split may have fewer)
  int splits;              // gridDim.y
};

// ---- weight formats (the dequantizing policies) -----------------------------

template <int G>
struct Int4Format {
  static_assert(G == 64 || G == 128, "INT4 group size must be 64 or 128");
  static constexpr bool kGroupScales = true;
  static constexpr int kGroup = G;
  static constexpr int kWords = 4;  // 32-bit words per lane per full block (16 B)
  using Scale = std::conditional_t<G == 128, uint32_t, uint2>;  // per lane per block
  static constexpr int kScaleBlockElems = (layout::kBlockK / G) * layout::kTileN;

  __device__ static size_t tile_bytes(int k) { return size_t(k) / 2 * layout::kTileN; }
  // Full block: one 16-byte load; tail half block: 8 bytes (words 0, 1).
  __device__ static void load(const uint8_t* tile, int kb, bool tail, int lane, uint32_t (&w)[kWords]) {
    const uint8_t* b = tile + size_t(kb) * layout::kInt4BlockBytes;
    if (!tail) {
      const uint4 v = ptx::ld_stream_v4(b + lane * 16);
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
      const uint2 v = ptx::ld_stream_v2(b + lane * 8);
      w[0] = v.x, w[1] = v.y, w[2] = w[3] = 0u;
    }
  }
  __device__ static Scale load_scale(const void* scales, int k, int tile, int kb, bool tail, int c) {
    const uint16_t* s = static_cast<const uint16_t*>(scales) + size_t(tile) * (size_t(k) / G) * layout::kTileN +
                        size_t(kb) * kScaleBlockElems;
    if constexpr (G == 128) {
      return ptx::ld_cached_b32(s + 2 * c);
    } else {
      if (tail) return make_uint2(ptx::ld_cached_b32(s + 2 * c), 0u);
      return ptx::ld_cached_v2(s + 4 * c);
    }
  }
  // B fragments of steps 2i and 2i+1 (i = 0..3, a compile-time constant).
  __device__ static void steps(const uint32_t (&w)[kWords], int i, uint32_t (&b)[4]) {
    layout::int4x8_to_bf16(w[i], b);
  }
};

struct E4M3Format {
  static constexpr bool kGroupScales = false;
  static constexpr int kGroup = layout::kBlockK;  // unused: one scale per channel
  static constexpr int kWords = 8;                // 32 bytes per lane per full block
  using Scale = uint32_t;                         // unused

  __device__ static size_t tile_bytes(int k) { return size_t(k) * layout::kTileN; }
  __device__ static void load(const uint8_t* tile, int kb, bool tail, int lane, uint32_t (&w)[kWords]) {
    const uint8_t* b = tile + size_t(kb) * layout::kE4M3BlockBytes + lane * 16;
    const uint4 v0 = ptx::ld_stream_v4(b);
    w[0] = v0.x, w[1] = v0.y, w[2] = v0.z, w[3] = v0.w;
    if (!tail) {
      const uint4 v1 = ptx::ld_stream_v4(b + layout::kE4M3HalfBytes);
      w[4] = v1.x, w[5] = v1.y, w[6] = v1.z, w[7] = v1.w;
    } else {
      w[4] = w[5] = w[6] = w[7] = 0u;
    }
  }
  __device__ static Scale load_scale(const void*, int, int, int, bool, int) { return 0u; }
  __device__ static void steps(const uint32_t (&w)[kWords], int i, uint32_t (&b)[4]) {
    uint32_t lo[2], hi[2];
    layout::e4m3x4_to_bf16(w[2 * i], lo);
    layout::e4m3x4_to_bf16(w[2 * i + 1], hi);
    b[0] = lo[0], b[1] = lo[1], b[2] = hi[0], b[3] = hi[1];
  }
};

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant
}

// ---- the kernel ---------------------------------------------------------------

template <class WF, int MT, int TN>
__global__ void __launch_bounds__(256, 2) sm90_w4a16_skinny_kernel(const SkinnyParams p) {
  static_assert(MT == 1 || MT == 2, "MT m16 tiles: 1 (M <= 16) or 2 (M <= 32)");
  static_assert(TN == 1 || TN == 2 || TN == 4, "TN n8 tiles per warp: 1, 2 or 4");
  constexpr int kWarps = 8;
  constexpr int kPF = 2;  // ring depth: kPF * TN weight loads in flight per lane
  constexpr int kW = WF::kWords;
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
  const uint8_t* wt[TN];
#pragma unroll
  for (int t = 0; t < TN; ++t) {
    tile[t] = blockIdx.x * kWarps * TN + t * kWarps + warp;
    tok[t] = tile[t] < ntiles;
    wt[t] = p.w + size_t(tok[t] ? tile[t] : 0) * WF::tile_bytes(p.k);
  }

  float acc[TN][MT][4];
#pragma unroll
  for (int t = 0; t < TN; ++t)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) acc[t][mt][0] = acc[t][mt][1] = acc[t][mt][2] = acc[t][mt][3] = 0.f;

  // Activations for step pair i2 of half h of block kb: rows 16mt + g (+8),
  // inputs 64h + 16c + 8*i2 + 0..7 (loaded per step pair to keep registers low).
  auto load_x = [&](int kb, int h, int i2, uint4 (&xq)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = 16 * mt + 8 * r + g;
        if (row < p.m) {
          xq[mt][r] = ptx::ld_cached_v4(p.x + size_t(row) * p.k + size_t(kb) * layout::kBlockK +
                                        h * layout::kHalfK + 16 * c + 8 * i2);
        } else {
          xq[mt][r] = make_uint4(0, 0, 0, 0);
        }
      }
  };
  // FP32 scaling of one group's partial sums: acc += s * blk (channels 2c, 2c+1).
  auto apply = [&](float (&blk)[TN][MT][4], const Scale (&sv)[TN], int h) {
#pragma unroll
    for (int t = 0; t < TN; ++t) {
      uint32_t s2;
      if constexpr (WF::kGroup == 64) s2 = h == 0 ? sv[t].x : sv[t].y;
      else s2 = sv[t];
      const float2 s = __half22float2(*reinterpret_cast<const __half2*>(&s2));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        acc[t][mt][0] = fmaf(s.x, blk[t][mt][0], acc[t][mt][0]);
        acc[t][mt][1] = fmaf(s.y, blk[t][mt][1], acc[t][mt][1]);
        acc[t][mt][2] = fmaf(s.x, blk[t][mt][2], acc[t][mt][2]);
        acc[t][mt][3] = fmaf(s.y, blk[t][mt][3], acc[t][mt][3]);
        blk[t][mt][0] = blk[t][mt][1] = blk[t][mt][2] = blk[t][mt][3] = 0.f;
      }
    }
  };
  // One block (both halves, or half 0 of a tail block): MMAs and group scaling.
  auto block = [&](int kb, const uint32_t (&w)[TN][kW], const Scale (&sv)[TN], bool tail) {
    float blk[TN][MT][4];
#pragma unroll
    for (int t = 0; t < TN; ++t)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) blk[t][mt][0] = blk[t][mt][1] = blk[t][mt][2] = blk[t][mt][3] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && tail) break;
#pragma unroll
      for (int i2 = 0; i2 < 2; ++i2) {  // step pair (4h + 2*i2, 4h + 2*i2 + 1)
        uint4 xq[MT][2];
        load_x(kb, h, i2, xq);
#pragma unroll
        for (int t = 0; t < TN; ++t) {
          uint32_t b[4];
          WF::steps(w[t], 2 * h + i2, b);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint4& r0 = xq[mt][0];
            const uint4& r1 = xq[mt][1];
            const uint32_t a0[4] = {r0.x, r1.x, r0.y, r1.y};  // step 4h + 2*i2
            const uint32_t a1[4] = {r0.z, r1.z, r0.w, r1.w};  // step 4h + 2*i2 + 1
            const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            if constexpr (WF::kGroupScales) {
              ptx::mma_m16n8k16_bf16(blk[t][mt], a0, b0);
              ptx::mma_m16n8k16_bf16(blk[t][mt], a1, b1);
            } else {
              ptx::mma_m16n8k16_bf16(acc[t][mt], a0, b0);
              ptx::mma_m16n8k16_bf16(acc[t][mt], a1, b1);
            }
          }
        }
      }
      if constexpr (WF::kGroupScales && WF::kGroup == 64) apply(blk, sv, h);
    }
    if constexpr (WF::kGroupScales && WF::kGroup == 128) apply(blk, sv, 0);
  };

  // ---- main loop: ring of kPF x TN weight fragments in flight ---------------
  uint32_t wr[kPF][TN][kW];
  Scale sr[kPF][TN];
  auto fill = [&](int slot, int kb, bool tail) {
#pragma unroll
    for (int t = 0; t < TN; ++t) {
      if (tok[t]) {
        WF::load(wt[t], kb, tail, lane, wr[slot][t]);
        if constexpr (WF::kGroupScales) sr[slot][t] = WF::load_scale(p.scales, p.k, tile[t], kb, tail, c);
      } else {
#pragma unroll
        for (int i = 0; i < kW; ++i) wr[slot][t][i] = 0u;
        if constexpr (WF::kGroupScales) sr[slot][t] = Scale{};
      }
    }
  };
#pragma unroll
  for (int u = 0; u < kPF; ++u)
    if (u < nj) fill(u, kb0 + u, false);
  for (int j0 = 0; j0 < nj; j0 += kPF) {
#pragma unroll
    for (int u = 0; u < kPF; ++u) {
      const int j = j0 + u;
      if (j < nj) {
        uint32_t w[TN][kW];
        Scale sv[TN];
#pragma unroll
        for (int t = 0; t < TN; ++t) {
#pragma unroll
          for (int i = 0; i < kW; ++i) w[t][i] = wr[u][t][i];
          sv[t] = sr[u][t];
        }
        if (j + kPF < nj) fill(u, kb0 + j + kPF, false);
        block(kb0 + j, w, sv, false);
      }
    }
  }
  if (tail_here) {  // the 64-wide K tail (INT4 needs G == 64 for it; the launcher checks)
    fill(0, nfull, true);
    uint32_t w[TN][kW];
    Scale sv[TN];
#pragma unroll
    for (int t = 0; t < TN; ++t) {
#pragma unroll
      for (int i = 0; i < kW; ++i) w[t][i] = wr[0][t][i];
      sv[t] = sr[0][t];
    }
    block(nfull, w, sv, true);
  }

  // ---- epilogue -------------------------------------------------------------
  // Per-channel scale of the E4M3 path.
  float2 cs[TN];
#pragma unroll
  for (int t = 0; t < TN; ++t) {
    cs[t] = make_float2(1.f, 1.f);
    if constexpr (!WF::kGroupScales)
      if (tok[t]) cs[t] = *reinterpret_cast<const float2*>(static_cast<const float*>(p.scales) +
                                                            size_t(tile[t]) * layout::kTileN + 2 * c);
  }
  auto store_y = [&](int t, int mt, int r, float v0, float v1) {
    const int row = 16 * mt + 8 * r + g;
    if (tok[t] && row < p.m) {
      const size_t col = size_t(tile[t]) * layout::kTileN + 2 * c;
      *reinterpret_cast<__nv_bfloat162*>(p.y + size_t(row) * p.n + col) =
          __floats2bfloat162_rn(v0 * cs[t].x, v1 * cs[t].y);
    }
  };
  if (p.splits == 1) {
#pragma unroll
    for (int t = 0; t < TN; ++t)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        store_y(t, mt, 0, acc[t][mt][0], acc[t][mt][1]);
        store_y(t, mt, 1, acc[t][mt][2], acc[t][mt][3]);
      }
    return;
  }

  // Split-K: publish this split's partials, then the last CTA to arrive reduces.
  auto part = [&](int split, int t, int mt, int r) -> float* {
    const int row = 16 * mt + 8 * r + g;
    return p.ws + (size_t(split) * p.m + row) * p.n + size_t(tile[t]) * layout::kTileN + 2 * c;
  };
#pragma unroll
  for (int t = 0; t < TN; ++t)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (tok[t] && 16 * mt + 8 * r + g < p.m)
          *reinterpret_cast<float2*>(part(blockIdx.y, t, mt, r)) = make_float2(acc[t][mt][2 * r], acc[t][mt][2 * r + 1]);
  // NOTE: release: every thread's partials must be visible device-wide before
  // the counter moves; the last CTA's fence orders its reads after the atomic.
  __threadfence();
  __syncthreads();
  __shared__ uint32_t s_last;
  if (threadIdx.x == 0) s_last = atomicAdd(&p.counters[blockIdx.x], 1u) == uint32_t(p.splits - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
#pragma unroll
  for (int t = 0; t < TN; ++t)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (tok[t] && 16 * mt + 8 * r + g < p.m) {
          float2 sum = make_float2(0.f, 0.f);
          for (int sp = 0; sp < p.splits; ++sp) {  // split order: deterministic
            const float2 v = ptx::ld_l2_f2(part(sp, t, mt, r));
            sum.x += v.x;
            sum.y += v.y;
          }
          store_y(t, mt, r, sum.x, sum.y);
        }
  if (threadIdx.x == 0) p.counters[blockIdx.x] = 0u;  // re-arm for the next launch
}

}  // namespace futr::device
