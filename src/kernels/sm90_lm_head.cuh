// sm90_lm_head: the LM head of the decode step, a streaming BF16 skinny GEMM
// over the vocabulary with FP32 logits out (ref::lm_head is the reference):
//
//   out[r][v] = sum_k x[r][k] * W[v][k]        r < M (1..32), v < N (the vocabulary rows)
//
// W is the head's BF16 matrix [N][K] row-major (read exactly once: 2 N K
// bytes, the step's largest single read), or the head quantized to INT4 with
// FP16 scales per group of 128 inputs (W[v][k] = q s, N K / 2 bytes + scales:
// the --head int4 option; groups of 64 where K % 128 != 0, the quantizer's
// rule), x the BF16 rows [M][K] (L1), out FP32 [M][ld].
// Products are exact in FP32 (8 x 8 significant bits) and summed on the
// tensor cores (mma.sync m16n8k16, FP32 accumulation).
//
// Operand roles ("swap AB", as the W4A16 kernels): a 16-row tile of W is the
// A operand, 8 rows of x the B operand (n = 8 columns), so M = 1..8 costs one
// MMA per k16 step and nothing is padded to 16 rows of x. Lane (g, c) =
// (lane / 4, lane % 4) loads 32 contiguous bytes of W rows g and g + 8 and of
// its x row g at k = 64 j + 16 c (16-byte loads, whole 128-byte lines per row
// per quad) and uses them as they come: within the chunk, the MMA's k slot
// pair (2c, 2c+1) of step i holds k = 64 j + 16 c + 4 i + {0, 1}, the pair
// (2c+8, 2c+9) holds + {2, 3}. A and B are permuted alike, so the sum is the
// same dot product in a fixed order.
//
// Work split: a warp owns one 16-row tile of W and all of K (no split-K, no
// workspace); a CTA of 8 warps 8 consecutive tiles (its work unit, kernels/
// work_unit.h). Each lane keeps U chunks of W in flight (4 x 16-byte loads per
// chunk), issued before the wait on the previous op (W is a weight).
//
// NOTE: batch invariance (gpu_engine/engine.h). Each output is one chain of
// MMAs over k = 0, 64, 128, ... (4 steps per chunk), the same chain for every
// M, every MT and U variant and every unit map: a row's logits have the same
// bits whatever rows share the launch. An MMA's output column depends only on
// its own B column.
//
// Limits: K % 64 == 0 (INT4: K % G == 0 and N % 16 == 0); M in 1..32; W
// and x 16-byte aligned (K % 8 == 0 follows); ld >= N (checked by the
// launcher, src/launch/lm_head.cu).
// Test: tests/kernels/lm_head_test.cpp. Benchmark: bench/lm_head_bench.cpp.
// Work unit: lm_head_unit (the contract: kernels/work_unit.h); the __global__
// kernel is its wrapper, one CTA per unit.
#pragma once

#include <cstdint>

#include <type_traits>

#include "kernels/ptx/ld.cuh"
#include "kernels/ptx/mma.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/sm90_w4a16_common.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

struct LmHeadParams {
  const void* w = nullptr;       // BF16 head: [n][k] row-major (vocabulary rows);
                                 //   INT4 head: n k / 2 bytes, fragment order (quant::Int4Packed)
  const void* scales = nullptr;  // INT4 head: [n / 8][k / G][8] FP16 pairs, fragment order; BF16: unused
  const uint16_t* x = nullptr;   // [m][k] BF16 row-major
  float* out = nullptr;          // [m][ld] FP32
  int64_t ld = 0;                // elements between output rows (>= n)
  int m = 0, n = 0, k = 0;
};

inline constexpr int kLmHeadThreads = 256;
inline constexpr int kLmHeadWarps = kLmHeadThreads / 32;
inline constexpr int kLmHeadTileN = 16;   // vocabulary rows per warp
inline constexpr int kLmHeadChunkK = 64;  // k per chunk (4 MMA steps)

// Units (CTAs) of a head of n rows.
__host__ __device__ constexpr int lm_head_units(int n) {
  return (n + kLmHeadWarps * kLmHeadTileN - 1) / (kLmHeadWarps * kLmHeadTileN);
}

// The head's weight formats (the A operand's source, template parameter WF):
//   LmHeadBf16: the BF16 rows [n][k] row-major; a lane's chunk is 32 bytes of
//     rows g and g + 8 (four 16-byte loads), used as they come (above);
//   Int4Format<G> (sm90_w4a16_common.cuh, G = 128 or 64): the INT4 head in
//     the decode GEMMs' fragment order (quant::pack_int4; N % 16 == 0,
//     K % G == 0), 16 bytes per lane and chunk plus its group's FP16 scales
//     (one 4-byte load per chunk); a group's chunks are summed on the tensor
//     cores from zero, then acc += s * group (FP32), as the W4A16 kernels do.
struct LmHeadBf16 {
  static constexpr bool kGroupScales = false;
  static constexpr int kGroup = 0;
};

// One unit (work_unit.h): tiles 8 unit .. 8 unit + 7 of 16 vocabulary rows,
// kLmHeadThreads threads, no shared memory. MT: row tiles of 8 (M <= 8 MT);
// U: chunks of W in flight per lane (even for the INT4 head: whole groups).
template <class WF, int MT, int U, class Deps>
__device__ __forceinline__ void lm_head_unit(const LmHeadParams& p, int unit, int /*units*/,
                                             const Deps& deps) {
  static_assert(MT == 1 || MT == 2 || MT == 4, "MT row tiles of 8: 1, 2 or 4");
  static_assert(U >= 1 && U <= 8, "U chunks in flight: 1..8");
  constexpr bool kInt4 = !std::is_same_v<WF, LmHeadBf16>;
  static_assert(!kInt4 || (WF::kGroupScales && U % 2 == 0),
                "the INT4 head: group scales, whole k128 blocks in flight");
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int tile = unit * kLmHeadWarps + warp;
  const int ntiles = (p.n + kLmHeadTileN - 1) / kLmHeadTileN;
  if (tile >= ntiles) return;  // the last unit's spare warps (no barrier below)
  const int nchunks = p.k / kLmHeadChunkK;
  const int v0 = tile * kLmHeadTileN + g;

  // ---- W: this lane's part of the tile's chunks, U chunks in flight -----------------
  // BF16: rows g and g + 8 (the tail's missing rows read row n - 1, never stored);
  // wr[u]: chunk words of row g (0, 1) and row g + 8 (2, 3).
  const uint16_t* const w0 =
      static_cast<const uint16_t*>(p.w) + size_t(min(v0, p.n - 1)) * size_t(p.k) + 16 * c;
  const uint16_t* const w1 =
      static_cast<const uint16_t*>(p.w) + size_t(min(v0 + 8, p.n - 1)) * size_t(p.k) + 16 * c;
  uint4 wr[kInt4 ? 1 : U][4];
  // INT4: the lane's 16-byte pieces (layout/int4_fragment.cuh) and its scales (channels g, g + 8).
  const uint8_t* wq = nullptr;
  size_t wq_stride = 0;
  const uint16_t* sq = nullptr;
  uint32_t qr[kInt4 ? U : 1][1][4];
  uint32_t sr[kInt4 ? U : 1][1];
  if constexpr (kInt4) {
    const uint8_t* const base = reinterpret_cast<const uint8_t*>(p.w);
    wq = base + layout::tile_chunk_offset(ntiles, p.k, WF::kChunkBytes, tile, 0) + lane * 16;
    wq_stride = layout::tile_chunk_stride(ntiles, WF::kChunkBytes, tile);
    sq = WF::scale_ptr(p.scales, p.k, tile, 0, g);
  }
  auto fill = [&](int u, int j) {  // chunk j into ring slot u (u and j of one parity)
    if constexpr (kInt4) {
      WF::load(wq, qr[u][0]);
      sr[u][0] = WF::load_scale(sq);
      wq += wq_stride;
      sq += WF::scale_step(u);
    } else {
      const size_t o = size_t(j) * kLmHeadChunkK;
      wr[u][0] = ptx::ld_stream_v4(w0 + o);
      wr[u][1] = ptx::ld_stream_v4(w0 + o + 8);
      wr[u][2] = ptx::ld_stream_v4(w1 + o);
      wr[u][3] = ptx::ld_stream_v4(w1 + o + 8);
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nchunks) fill(u, u);
  // The loads above stream weights; x belongs to the op before until the wait.
  deps.wait();

  // ---- x: row 8 mt + g of each row tile (rows >= m read row m - 1, never stored) ----
  const uint16_t* xr[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xr[mt] = p.x + size_t(min(8 * mt + g, p.m - 1)) * size_t(p.k) + 16 * c;

  // acc[0][mt]: the output fragments (D of mma.m16n8k16); blk: the INT4 head's current group.
  float acc[1][MT][4], blk[1][MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][mt][e] = blk[0][mt][e] = 0.f;

  // ---- main loop: batches of U chunks; the next batch issued after the last use ----
  for (int j0 = 0; j0 < nchunks; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u < nchunks) {
        const size_t o = size_t(j0 + u) * kLmHeadChunkK;
        uint4 xq[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          xq[mt][0] = ptx::ld_cached_v4(xr[mt] + o);
          xq[mt][1] = ptx::ld_cached_v4(xr[mt] + o + 8);
        }
        if constexpr (kInt4) {
          chunk_mma<WF, MT, 1>(blk, acc, qr[u], xq, WF::group_start(u));
          if (WF::group_end(u)) apply_scales<MT, 1>(acc, blk, sr[u]);
        } else {
          // Step i: words 2i, 2i + 1 of the chunk (row g: wr[u][0] words 0..3, wr[u][1] 4..7; row g + 8: 2,
          // 3).
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint4& l = wr[u][i / 2];
            const uint4& h = wr[u][2 + i / 2];
            const uint32_t a[4] = {i % 2 == 0 ? l.x : l.z, i % 2 == 0 ? h.x : h.z, i % 2 == 0 ? l.y : l.w,
                                   i % 2 == 0 ? h.y : h.w};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              const uint4& q = xq[mt][i / 2];
              const uint32_t b[2] = {i % 2 == 0 ? q.x : q.z, i % 2 == 0 ? q.y : q.w};
              ptx::mma_m16n8k16_bf16(acc[0][mt], a, b);
            }
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (j0 + u + U < nchunks) fill(u, j0 + u + U);
  }

  // ---- epilogue: acc[0][mt][e] = out[8 mt + 2c + e % 2][v0 + 8 (e / 2)] ----------------
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 8 * mt + 2 * c + e % 2, v = v0 + 8 * (e / 2);
      if (r < p.m && v < p.n) p.out[size_t(r) * size_t(p.ld) + size_t(v)] = acc[0][mt][e];
    }
}

template <class WF, int MT, int U>
__global__ void __launch_bounds__(kLmHeadThreads, 2) sm90_lm_head_kernel(const LmHeadParams p) {
  lm_head_unit<WF, MT, U>(p, blockIdx.x, gridDim.x, PdlDeps{});
}

}  // namespace futr::device
