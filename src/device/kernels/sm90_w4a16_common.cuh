// Pieces shared by the decode GEMM kernels sm90_w4a16_gemv.cuh (M = 1) and
// sm90_w4a16_skinny.cuh (M = 2..32):
//   - DecodeParams, the launch arguments of both;
//   - the weight-format policies Int4Format<G> (INT4 + FP16 group scales) and
//     E4M3Format (the W8A16 comparison path): loads and dequantization of one
//     lane's fragments (layout/int4_fragment.cuh is the byte contract);
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

#include "device/layout/int4_fragment.cuh"
#include "device/ptx/cp_async.cuh"
#include "device/ptx/ld.cuh"

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
};

// ---- weight formats (the dequantizing policies) -----------------------------

template <int G>
struct Int4Format {
  static_assert(G == 64 || G == 128, "INT4 group size must be 64 or 128");
  static constexpr bool kGroupScales = true;
  static constexpr int kGroup = G;
  static constexpr int kWords = 4;     // 32-bit words per lane per full block (16 B)
  static constexpr int kBlockBytes = layout::kInt4BlockBytes;
  static constexpr int kStages = 8;    // skinny ring depth: 8 x 16 B in flight per lane and tile
  static constexpr int kScaleBlockElems = (layout::kBlockK / G) * layout::kTileN;
  using Scale = std::conditional_t<G == 128, uint32_t, uint2>;  // one lane's scales of one block

  __device__ static size_t tile_bytes(int k) { return size_t(k) / 2 * layout::kTileN; }
  // This lane's first byte of block kb of a tile (full blocks; 16 B per lane).
  __device__ static const uint8_t* lane_ptr(const uint8_t* tile, int kb, int lane) {
    return tile + size_t(kb) * kBlockBytes + lane * 16;
  }
  // This lane's scales of block kb of tile `tile` (channels 2c, 2c+1).
  __device__ static const uint16_t* scale_ptr(const void* scales, int k, int tile, int kb, int c) {
    return static_cast<const uint16_t*>(scales) + size_t(tile) * (size_t(k) / G) * layout::kTileN +
           size_t(kb) * kScaleBlockElems + (G == 128 ? 2 : 4) * c;
  }
  static constexpr int kScaleStride = kScaleBlockElems;  // elements from one block to the next

  // Register loads of a full block.
  __device__ static void load(const uint8_t* lp, uint32_t (&w)[kWords]) {
    const uint4 v = ptx::ld_stream_v4(lp);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  }
  __device__ static Scale load_scale(const uint16_t* sp) {
    if constexpr (G == 128) return ptx::ld_cached_b32(sp);
    else return ptx::ld_cached_v2(sp);
  }
  // The 64-wide K tail (a half block: 8 bytes per lane at lane*8; scales [c][2]).
  __device__ static void load_tail(const uint8_t* tile, int kb, int lane, uint32_t (&w)[kWords]) {
    const uint2 v = ptx::ld_stream_v2(tile + size_t(kb) * kBlockBytes + lane * 8);
    w[0] = v.x, w[1] = v.y, w[2] = w[3] = 0u;
  }
  __device__ static Scale load_tail_scale(const void* scales, int k, int tile, int kb, int c) {
    const uint16_t* s = static_cast<const uint16_t*>(scales) + size_t(tile) * (size_t(k) / G) * layout::kTileN +
                        size_t(kb) * kScaleBlockElems + 2 * c;
    if constexpr (G == 128) return ptx::ld_cached_b32(s);  // unreachable: G = 128 has no tail
    else return make_uint2(ptx::ld_cached_b32(s), 0u);
  }
  // cp.async of a full block's fragment (16 B) and scales (4 or 8 B) into a ring slot.
  __device__ static void issue(const uint8_t* lp, uint4* dst) { ptx::cp_async_16_cg(dst, lp); }
  __device__ static void issue_scale(const uint16_t* sp, uint2* dst) {
    if constexpr (G == 128) ptx::cp_async_4_ca(dst, sp);
    else ptx::cp_async_8_ca(dst, sp);
  }
  __device__ static Scale scale_from(const uint2& v) {
    if constexpr (G == 128) return v.x;
    else return v;
  }
  // The FP16 scale pair of half h (channels 2c, 2c+1) as a 32-bit word.
  __device__ static uint32_t half_scale(const Scale& s, int h) {
    if constexpr (G == 128) return s;
    else return h == 0 ? s.x : s.y;
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
  static constexpr int kBlockBytes = layout::kE4M3BlockBytes;
  static constexpr int kStages = 4;               // 4 x 32 B in flight per lane and tile
  static constexpr int kScaleStride = 0;
  using Scale = uint32_t;                         // unused

  __device__ static size_t tile_bytes(int k) { return size_t(k) * layout::kTileN; }
  __device__ static const uint8_t* lane_ptr(const uint8_t* tile, int kb, int lane) {
    return tile + size_t(kb) * kBlockBytes + lane * 16;
  }
  __device__ static const uint16_t* scale_ptr(const void*, int, int, int, int) { return nullptr; }
  __device__ static void load(const uint8_t* lp, uint32_t (&w)[kWords]) {
    const uint4 v0 = ptx::ld_stream_v4(lp), v1 = ptx::ld_stream_v4(lp + layout::kE4M3HalfBytes);
    w[0] = v0.x, w[1] = v0.y, w[2] = v0.z, w[3] = v0.w, w[4] = v1.x, w[5] = v1.y, w[6] = v1.z, w[7] = v1.w;
  }
  __device__ static Scale load_scale(const uint16_t*) { return 0u; }
  __device__ static void load_tail(const uint8_t* tile, int kb, int lane, uint32_t (&w)[kWords]) {
    const uint4 v = ptx::ld_stream_v4(tile + size_t(kb) * kBlockBytes + lane * 16);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w, w[4] = w[5] = w[6] = w[7] = 0u;
  }
  __device__ static Scale load_tail_scale(const void*, int, int, int, int) { return 0u; }
  __device__ static void issue(const uint8_t* lp, uint4* dst) {
    ptx::cp_async_16_cg(dst, lp);
    ptx::cp_async_16_cg(dst + 256, lp + layout::kE4M3HalfBytes);  // next chunk row of the ring
  }
  __device__ static void issue_scale(const uint16_t*, uint2*) {}
  __device__ static Scale scale_from(const uint2&) { return 0u; }
  __device__ static uint32_t half_scale(const Scale&, int) { return 0u; }
  __device__ static void steps(const uint32_t (&w)[kWords], int i, uint32_t (&b)[4]) {
    uint32_t lo[2], hi[2];
    layout::e4m3x4_to_bf16(w[2 * i], lo);
    layout::e4m3x4_to_bf16(w[2 * i + 1], hi);
    b[0] = lo[0], b[1] = lo[1], b[2] = hi[0], b[3] = hi[1];
  }
};

// ---- the epilogue -------------------------------------------------------------
// acc[t][mt][i]: the C fragment of tile t, m-tile mt (rows 16mt + g (+8), channels
// 2c, 2c+1). rows_used: 1 when only row 0 is meaningful (the gemv kernel).
template <class WF, int MT, int TN>
__device__ __forceinline__ void store_output(const DecodeParams& p, const float (&acc)[TN][MT][4], const int (&tile)[TN],
                                             const bool (&tok)[TN], int g, int c) {
  // Per-channel scale of the E4M3 path.
  float2 cs[TN];
#pragma unroll
  for (int t = 0; t < TN; ++t) {
    cs[t] = make_float2(1.f, 1.f);
    if constexpr (!WF::kGroupScales)
      if (tok[t]) cs[t] = *reinterpret_cast<const float2*>(static_cast<const float*>(p.scales) +
                                                            size_t(tile[t]) * layout::kTileN + 2 * c);
  }
  auto store_y = [&](int t, int row, float v0, float v1) {
    const size_t col = size_t(tile[t]) * layout::kTileN + 2 * c;
    *reinterpret_cast<__nv_bfloat162*>(p.y + size_t(row) * p.n + col) =
        __floats2bfloat162_rn(v0 * cs[t].x, v1 * cs[t].y);
  };
  if (p.splits == 1) {
#pragma unroll
    for (int t = 0; t < TN; ++t)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = 16 * mt + 8 * r + g;
          if (tok[t] && row < p.m) store_y(t, row, acc[t][mt][2 * r], acc[t][mt][2 * r + 1]);
        }
    return;
  }
  // Split-K: publish this split's partials, then the last CTA to arrive reduces.
  auto part = [&](int split, int t, int row) -> float* {
    return p.ws + (size_t(split) * p.m + row) * p.n + size_t(tile[t]) * layout::kTileN + 2 * c;
  };
#pragma unroll
  for (int t = 0; t < TN; ++t)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = 16 * mt + 8 * r + g;
        if (tok[t] && row < p.m)
          *reinterpret_cast<float2*>(part(blockIdx.y, t, row)) = make_float2(acc[t][mt][2 * r], acc[t][mt][2 * r + 1]);
      }
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
      for (int r = 0; r < 2; ++r) {
        const int row = 16 * mt + 8 * r + g;
        if (tok[t] && row < p.m) {
          float2 sum = make_float2(0.f, 0.f);
          for (int sp = 0; sp < p.splits; ++sp) {  // split order: deterministic
            const float2 v = ptx::ld_l2_f2(part(sp, t, row));
            sum.x += v.x;
            sum.y += v.y;
          }
          store_y(t, row, sum.x, sum.y);
        }
      }
  if (threadIdx.x == 0) p.counters[blockIdx.x] = 0u;  // re-arm for the next launch
}

}  // namespace futr::device
