// Pieces shared by the decode GEMM kernels sm90_w4a16_gemv.cuh (M = 1..8) and
// sm90_w4a16_skinny.cuh (M = 2..32):
//   - DecodeParams, the launch arguments of both;
//   - the weight-format policies Int4Format<G> (INT4 + FP16 group scales) and
//     E4M3Format (the W8A16 comparison path): loads and dequantization of one
//     lane's fragments (layout/int4_fragment.cuh is the byte contract);
//   - chunk_mma() / apply_scales(): the MMAs of one k64 chunk (weights = A,
//     activations = B) and the FP32 group scaling;
//   - store_output(): the epilogue of both, which either writes BF16 y directly
//     (splits == 1) or runs the split-K reduction without a second pass: every
//     CTA publishes its FP32 partial tile to ws[split][M][N] and bumps
//     counters[blockIdx.x]; the CTA that arrives last sums the splits' partials
//     in split order (deterministic), writes y and re-arms the counter to 0 so
//     that CUDA-graph replays need no reset.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/layout/int4_fragment.cuh"
#include "kernels/ptx/cp_async.cuh"
#include "kernels/ptx/ld.cuh"
#include "kernels/ptx/mma.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

struct DecodeParams {
  const uint8_t* w;        // packed weights, fragment order (WF)
  const void* scales;      // Int4: [N/8][K/G][8] FP16 fragment order; E4M3: [N] FP32
  const __nv_bfloat16* x;  // [M, K] row-major
  __nv_bfloat16* y;        // [M, N] row-major
  float* ws;               // [splits, M, N] FP32 partials (splits > 1 only)
  uint32_t* counters;      // [gridDim.x] arrival counters, all 0 between launches
  int m, n, k;             // rows, output channels, inputs
  int kb_per_split;        // k128 blocks per split (the last split may have fewer)
  int splits;              // gridDim.y
  int run_items;           // stream kernel: 0 = one contiguous range per CTA (stream-K);
                           // R > 0 = runs of R items dealt round-robin to the CTAs
  int probe;               // stream kernel, measurement only (0 = off): bit 1 no scale copies,
                           // bit 2 no activation copies, bit 4 consumers only wait and release
  int x_swiglu;            // gemv only: x is [M, 2K] gate|up and the input is bf16(silu(gate) * up)
  // gemv only, the RMSNorm fused in (x_norm = 1): the input is
  // bf16(RMSNorm(v) g) with v = nx + bf16 nadd, rows [M, K] (x unused);
  // CTA (0, 0) stores v to nx_out (another buffer: every CTA reads nx).
  int x_norm;
  const float* nx;        // [M, K] FP32 residual before the add
  const uint16_t* nadd;   // [M, K] BF16 (the previous GEMM's y)
  const uint16_t* ngain;  // [K] BF16 RMSNorm gain
  float* nx_out;          // [M, K] FP32: v
  float neps;             // RMSNorm epsilon
  // skinny only, sequential splits (> 0): the CTA covers a group of splits
  // (all of K when gridDim.y = 1) and folds its sum every vsplit_chunks k64
  // chunks, the boundaries of the splits it stands in for: its output is the
  // group's sum (((0 + s_0) + s_1) + ...), the order and roundings of the
  // reduction of those splits (reduce_partials), so a row has the same bits
  // as with one CTA per split, with fewer (or no) partials.
  int vsplit_chunks;
  // The reduction's two levels: the last CTA sums its column's partials in
  // groups of reduce_group (each group from +0, in split order), then the
  // groups' sums in order. 0: one group (a plain in-order sum). A launch with
  // one CTA per split sets the shape's group size; one with a CTA per group
  // (the groups' sums as its partials) sets 1.
  int reduce_group;
};

// The gemv's rows at most (M = 1..8: one 8-column MMA B operand, lane g reads
// row g; the launchers' cuda::kDecodeGemvMaxRows).
inline constexpr int kGemvMaxRows = 8;

// Static shared memory of a gemv or skinny unit, as a view of its pieces (work_unit.h).
struct W4a16Smem {
  float* part;     // [8 * M] the gemv's fused RMSNorm: row r's warp sums of squares at part[8 r ..]
                   // (null in the skinny kernel; a caller of one-row gemvs only may give [8])
  uint32_t* last;  // the split-K arrival's verdict
  static constexpr size_t kBytes = 8 * kGemvMaxRows * 4 + 4;
};

// ---- weight formats (the dequantizing policies) -----------------------------
// The loop unit of both kernels is a k64 chunk of a 16-channel tile: kWords
// 32-bit words per lane (layout/int4_fragment.cuh: layout::tile_chunk_offset
// places a tile's chunks, interleaved with the other tiles of its group of 8);
// scale_ptr gives a lane's first scales, advanced by scale_step().

template <int G>
struct Int4Format {
  static_assert(G == 64 || G == 128, "INT4 group size must be 64 or 128");
  static constexpr bool kGroupScales = true;
  static constexpr int kGroup = G;
  static constexpr int kWords = 4;  // 16 bytes per lane per chunk
  static constexpr int kChunkBytes = layout::kInt4ChunkBytes;
  static constexpr int kStages = 8;  // skinny ring depth: 8 chunks (x 16 B) in flight per lane and tile
  using Scale = uint32_t;            // FP16 {s[lo], s[hi]} of the lane's two channels

  // This lane's scales (channels g and g + 8) of the group holding chunk `chunk`.
  __device__ static const uint16_t* scale_ptr(const void* scales, int k, int tile, int chunk, int g) {
    return static_cast<const uint16_t*>(scales) + size_t(tile) * (size_t(k) / G) * layout::kTileN +
           size_t(chunk * layout::kChunkK / G) * layout::kTileN + 2 * g;
  }
  // Scale pointer advance after chunk u of a 128-aligned pair (u even/odd).
  __device__ static constexpr int scale_step(int u) { return (G == 64 || u % 2 == 1) ? layout::kTileN : 0; }
  // True when chunk u (parity within a 128-aligned pair) ends a group.
  __device__ static constexpr bool group_end(int u) { return G == 64 || u % 2 == 1; }
  __device__ static constexpr bool group_start(int u) { return G == 64 || u % 2 == 0; }

  __device__ static void load(const uint8_t* lp, uint32_t (&w)[kWords]) {
    const uint4 v = ptx::ld_stream_v4(lp);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  }
  __device__ static Scale load_scale(const uint16_t* sp) { return ptx::ld_cached_b32(sp); }
  // cp.async of one chunk's fragment (16 B) and scale word (4 B) into ring slots.
  __device__ static void issue(const uint8_t* lp, uint4* dst) { ptx::cp_async_16_cg(dst, lp); }
  __device__ static void issue_scale(const uint16_t* sp, uint32_t* dst) { ptx::cp_async_4_ca(dst, sp); }
  // A fragment of step i (0..3, a compile-time constant).
  __device__ static void step(const uint32_t (&w)[kWords], int i, uint32_t (&a)[4]) {
    layout::int4x8_to_bf16(w[i], a);
  }
};

struct E4M3Format {
  static constexpr bool kGroupScales = false;
  static constexpr int kGroup = layout::kChunkK;  // unused: one scale per channel
  static constexpr int kWords = 8;                // 32 bytes per lane per chunk
  static constexpr int kChunkBytes = layout::kE4M3ChunkBytes;
  static constexpr int kStages = 4;  // 4 chunks (x 32 B) in flight per lane and tile
  using Scale = uint32_t;            // unused

  __device__ static const uint16_t* scale_ptr(const void*, int, int, int, int) { return nullptr; }
  __device__ static constexpr int scale_step(int) { return 0; }
  __device__ static constexpr bool group_end(int) { return false; }
  __device__ static constexpr bool group_start(int) { return false; }
  __device__ static void load(const uint8_t* lp, uint32_t (&w)[kWords]) {
    const uint4 v0 = ptx::ld_stream_v4(lp), v1 = ptx::ld_stream_v4(lp + layout::kE4M3PartBytes);
    w[0] = v0.x, w[1] = v0.y, w[2] = v0.z, w[3] = v0.w, w[4] = v1.x, w[5] = v1.y, w[6] = v1.z, w[7] = v1.w;
  }
  __device__ static Scale load_scale(const uint16_t*) { return 0u; }
  __device__ static void issue(const uint8_t* lp, uint4* dst) {
    ptx::cp_async_16_cg(dst, lp);
    ptx::cp_async_16_cg(dst + 256, lp + layout::kE4M3PartBytes);  // next chunk row of the ring
  }
  __device__ static void issue_scale(const uint16_t*, uint32_t*) {}
  // Step i: words 2i (a[0], a[1]) and 2i + 1 (a[2], a[3]).
  __device__ static void step(const uint32_t (&w)[kWords], int i, uint32_t (&a)[4]) {
    uint32_t r0[2], r1[2];
    layout::e4m3x4_to_bf16(w[2 * i], r0);
    layout::e4m3x4_to_bf16(w[2 * i + 1], r1);
    a[0] = r0[0], a[1] = r0[1], a[2] = r1[0], a[3] = r1[1];
  }
};

// ---- the warp's part of the problem (both kernels) ---------------------------
// CTA (x, y) of 8 warps covers 8*TM tiles of 16 channels and split y of K;
// warp w takes tiles 8*TM*x + 8*tm + w. c0 is the split's first k64 chunk
// (even: splits are whole k128 blocks), nj its number of chunks. Per tile:
// whether it exists (out-of-range tiles re-read tile 0 and are never stored),
// the lane's next 16-byte weight piece, its scales, and the byte stride from
// one chunk of the tile to the next (the width of its interleaved tile group).
template <class WF, int TM>
struct WarpTiles {
  static constexpr int kWarps = 8;
  int c0, nj;                 // first chunk and chunk count of this split
  int tile[TM];               // tile index (16 channels)
  bool tok[TM];               // tile < N/16
  const uint8_t* wnext[TM];   // this lane's next 16-byte weight piece
  const uint16_t* snext[TM];  // its scales
  size_t wstride[TM];         // bytes from one chunk of the tile to the next

  // col, split: the unit's column group (8 TM tiles) and K split (work_unit.h).
  __device__ __forceinline__ WarpTiles(const DecodeParams& p, int warp, int lane, unsigned col,
                                       unsigned split) {
    const int g = lane / 4;
    const int ntiles = p.n / layout::kTileN;
    const int nchunks = p.k / layout::kChunkK;
    const int nblk = (p.k + layout::kBlockK - 1) / layout::kBlockK;
    const int kb0 = split * p.kb_per_split;
    c0 = 2 * kb0;
    nj = max(0, min(nchunks, 2 * min(nblk, kb0 + p.kb_per_split)) - c0);
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) {
      tile[tm] = col * kWarps * TM + tm * kWarps + warp;
      tok[tm] = tile[tm] < ntiles;
      const int tt = tok[tm] ? tile[tm] : 0;
      wnext[tm] = p.w + layout::tile_chunk_offset(ntiles, p.k, WF::kChunkBytes, tt, c0) + lane * 16;
      wstride[tm] = layout::tile_chunk_stride(ntiles, WF::kChunkBytes, tt);
      snext[tm] = WF::scale_ptr(p.scales, p.k, tt, c0, g);
    }
  }
};

// One chunk of one warp: TM weight tiles (A) x MT row tiles of x (B).
// blk accumulates the current group; acc the scaled sums (both [TM][MT][4]:
// D rows = channels g (d[0], d[1]) and g + 8 (d[2], d[3]), columns = rows
// 8mt + 2c, 2c + 1 of x). xq[mt][0..1]: the lane's 16 activations of row 8mt + g.
template <class WF, int MT, int TM>
__device__ __forceinline__ void chunk_mma(float (&blk)[TM][MT][4], float (&acc)[TM][MT][4],
                                          const uint32_t (&w)[TM][WF::kWords], const uint4 (&xq)[MT][2],
                                          bool start) {
#pragma unroll
  for (int i = 0; i < layout::kStepsPerChunk; ++i) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) {
      uint32_t a[4];
      WF::step(w[tm], i, a);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint4& q = xq[mt][i / 2];
        const uint32_t b[2] = {i % 2 == 0 ? q.x : q.z, i % 2 == 0 ? q.y : q.w};
        if constexpr (WF::kGroupScales) {
          if (i == 0 && start) ptx::mma_m16n8k16_bf16_zc(blk[tm][mt], a, b);
          else ptx::mma_m16n8k16_bf16(blk[tm][mt], a, b);
        } else {
          ptx::mma_m16n8k16_bf16(acc[tm][mt], a, b);
        }
      }
    }
  }
}

// FP32 group scaling after accumulation: acc += s * blk (s[lo] rows d[0..1], s[hi] d[2..3]).
template <int MT, int TM>
__device__ __forceinline__ void apply_scales(float (&acc)[TM][MT][4], const float (&blk)[TM][MT][4],
                                             const uint32_t (&sv)[TM]) {
#pragma unroll
  for (int tm = 0; tm < TM; ++tm) {
    const float2 s = __half22float2(*reinterpret_cast<const __half2*>(&sv[tm]));
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      acc[tm][mt][0] = fmaf(s.x, blk[tm][mt][0], acc[tm][mt][0]);
      acc[tm][mt][1] = fmaf(s.x, blk[tm][mt][1], acc[tm][mt][1]);
      acc[tm][mt][2] = fmaf(s.y, blk[tm][mt][2], acc[tm][mt][2]);
      acc[tm][mt][3] = fmaf(s.y, blk[tm][mt][3], acc[tm][mt][3]);
    }
  }
}

// ---- the epilogue -------------------------------------------------------------
// The last contributor's reduction, shared by both epilogues: y[row, c0 + ch]
// for the `rows` x `width` outputs of a tile range = sum over r = 0..count-1
// of part(r, row, ch), in r order (deterministic: the same bits as a plain
// loop), spread over the `nthreads` threads that run it (one output each,
// adjacent channels on adjacent threads: coalesced) with 8 partials loaded
// before they are summed. Measured (docs/PERF.md): the
// per-fragment loop it replaces waited one L2 round trip per partial (~8 us
// of a 26 us down projection at 17 partials); a variant taking two outputs
// per thread with predicated batches of 8 measured slower in the decode step
// (SmolLM2 batch 8: 1.40 -> 1.54 ms).
template <class WF, class Part>
__device__ __forceinline__ void reduce_partials(const DecodeParams& p, Part part, int count, int rows,
                                                int width, size_t c0, int nthreads) {
  // Two levels (DecodeParams::reduce_group): a group's sum starts at +0, the
  // total at +0 and adds each group's sum when the group ends. With one group
  // this is the plain in-order sum's bits (a sum that starts at +0 is never
  // -0, so adding it to +0 changes nothing).
  const int grp = p.reduce_group > 0 && p.reduce_group < count ? p.reduce_group : count;
  for (int o = threadIdx.x; o < rows * width; o += nthreads) {
    const int row = o / width, ch = o % width;
    float sum = 0.f, gsum = 0.f;
    int left = grp;  // partials left in the current group
    auto add = [&](float v) {
      gsum = __fadd_rn(left == grp ? 0.f : gsum, v);
      if (--left == 0) {
        sum = __fadd_rn(sum, gsum);
        left = grp;
      }
    };
    int r = 0;
    for (; r + 8 <= count; r += 8) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = ptx::ld_l2_f32(part(r + i, row, ch));
#pragma unroll
      for (int i = 0; i < 8; ++i) add(v[i]);
    }
    for (; r < count; ++r) add(ptx::ld_l2_f32(part(r, row, ch)));
    if (left != grp) sum = __fadd_rn(sum, gsum);  // the last group, shorter
    float cs = 1.f;                               // the E4M3 path's per-channel scale
    if constexpr (!WF::kGroupScales) cs = static_cast<const float*>(p.scales)[c0 + ch];
    p.y[size_t(row) * p.n + c0 + ch] = __float2bfloat16_rn(sum * cs);
  }
}

// acc[tm][mt][i]: channel tile[tm]*16 + g + 8*(i/2), row of x 8mt + 2c + i%2.
// unit: the CTA's column group x() and split y() (work_unit.h); s_last: one
// word of shared memory (the split-K arrival's verdict); Bar: the body's
// barrier (work_unit.h).
template <class WF, int MT, int TM, class Unit, class Bar = CtaBarrier>
__device__ __forceinline__ void store_output(const DecodeParams& p, const float (&acc)[TM][MT][4],
                                             const int (&tile)[TM], const bool (&tok)[TM], int g, int c,
                                             const Unit& unit, uint32_t& s_last) {
  // Per-channel scales of the E4M3 path (channels g, g + 8).
  float cs[TM][2];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm) {
    cs[tm][0] = cs[tm][1] = 1.f;
    if constexpr (!WF::kGroupScales)
      if (tok[tm]) {
        const float* sp = static_cast<const float*>(p.scales) + size_t(tile[tm]) * layout::kTileN + g;
        cs[tm][0] = sp[0], cs[tm][1] = sp[8];
      }
  }
  auto channel = [&](int tm, int i) { return size_t(tile[tm]) * layout::kTileN + g + 8 * (i / 2); };
  auto row_of = [&](int mt, int i) { return 8 * mt + 2 * c + (i % 2); };
  if (p.splits == 1) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (tok[tm] && row_of(mt, i) < p.m)
            p.y[size_t(row_of(mt, i)) * p.n + channel(tm, i)] =
                __float2bfloat16_rn(acc[tm][mt][i] * cs[tm][i / 2]);
    return;
  }
  // Split-K: publish this split's partials, then the last CTA to arrive reduces.
  auto part = [&](int split, int tm, int mt, int i) -> float* {
    return p.ws + (size_t(split) * p.m + row_of(mt, i)) * p.n + channel(tm, i);
  };
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (tok[tm] && row_of(mt, i) < p.m) *part(unit.y(), tm, mt, i) = acc[tm][mt][i];
  // NOTE: release: every thread's partials must be visible device-wide before
  // the counter moves; the last CTA's fence orders its reads after the atomic.
  __threadfence();
  Bar::sync();
  if (threadIdx.x == 0) s_last = atomicAdd(&p.counters[unit.x()], 1u) == uint32_t(p.splits - 1);
  Bar::sync();
  if (!s_last) return;
  __threadfence();
  {  // the CTA's tiles are 8 TM consecutive ones (WarpTiles), the last range clipped to N
    const size_t c0 = size_t(unit.x()) * 8 * TM * layout::kTileN;
    const int width = int(min(size_t(8 * TM * layout::kTileN), size_t(p.n) - c0));
    reduce_partials<WF>(
        p, [&](int sp, int row, int ch) { return p.ws + (size_t(sp) * p.m + row) * p.n + c0 + ch; }, p.splits,
        p.m, width, c0, Bar::threads());
  }
  if (threadIdx.x == 0) p.counters[unit.x()] = 0u;  // re-arm for the next launch
}

}  // namespace futr::device
