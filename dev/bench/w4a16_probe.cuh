// w4a16_probe: the decode GEMM's work added, piece by piece, to the no-compute
// floor (bench::read_regions' loop: grid-stride 16-byte non-coherent loads, 4
// in flight per thread, 4 CTAs of 256 threads per SM), to find which piece
// stops the weight stream (docs/PERF.md, decode GEMMs). Per 16 bytes of weights
// (one lane's INT4 fragment of a k64 chunk):
//   kXor      nothing (xor-folded: the floor)
//   kDequant  the exact INT4 -> BF16 dequantizer (lop3 + fma.bf16x2, 44 instr.)
//   kMma      + the 4 mma.sync of the chunk (B = constant registers)
//   kMmaX     + the chunk's activations from L1 (2 x 16 B, an 8 KB vector)
//   kBiased   the biased dequantizer (lop3 only) + 4 mma + 4 all-ones mma + x
// and then the gemv's ways, on top of kMmaX (w4a16_probe_gemv_kernel):
//   5  + one 4-byte scale load per 16 bytes (issued with the weights) and its FMA
//   6  the weights through a 4-deep register ring refilled one chunk at a time
//   7  CTA-contiguous order: CTA b streams its own 1/grid of the bytes, its 8
//      warps reading 512 bytes each of every 4 KB step (the gemv's order)
//   8  5 + 6 + 7 together (the gemv without its split-K epilogue)
// Results are folded into a sink that is practically never written.
#pragma once

#include <cstdint>

#include "kernels/layout/int4_fragment.cuh"
#include "kernels/ptx/ld.cuh"
#include "kernels/ptx/mma.cuh"

namespace futr::bench {

enum class ProbeLevel : int { kXor = 0, kDequant = 1, kMma = 2, kMmaX = 3, kBiased = 4 };

template <int LEVEL>
__global__ void __launch_bounds__(256, 4)
    w4a16_probe_kernel(const uint4* w, size_t n16, const uint4* x, uint32_t* sink) {
  const int lane = threadIdx.x % 32;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  uint32_t h = 0;
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, sx[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t ones[4] = {layout::kBf16x2One, layout::kBf16x2One, layout::kBf16x2One, layout::kBf16x2One};
  // Warp-uniform loop bounds: mma.sync needs the whole warp.
  size_t iw = blockIdx.x * size_t(blockDim.x) + (threadIdx.x & ~31u);
#pragma unroll 1
  for (; iw + 3 * stride + 32 <= n16; iw += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = device::ptx::ld_stream_v4(w + iw + lane + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t wd[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      if constexpr (LEVEL == 0) {
        h ^= wd[0] ^ wd[1] ^ wd[2] ^ wd[3];
        continue;
      }
      uint4 xq0 = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u), xq1 = xq0;
      if constexpr (LEVEL >= 3) {
        const size_t xo = ((iw + u * stride) / 32 * 8 + (lane % 4) * 2) & 511;  // 8 KB of x
        xq0 = device::ptx::ld_cached_v4(x + xo);
        xq1 = device::ptx::ld_cached_v4(x + xo + 1);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t a[4];
        if constexpr (LEVEL == 4) layout::int4x8_to_bf16_biased(wd[i], a);
        else layout::int4x8_to_bf16(wd[i], a);
        if constexpr (LEVEL == 1) {
          h ^= a[0] ^ a[1] ^ a[2] ^ a[3];
          continue;
        }
        const uint4& q = i < 2 ? xq0 : xq1;
        const uint32_t b[2] = {i % 2 == 0 ? q.x : q.z, i % 2 == 0 ? q.y : q.w};
        device::ptx::mma_m16n8k16_bf16(acc, a, b);
        if constexpr (LEVEL == 4) device::ptx::mma_m16n8k16_bf16(sx, ones, b);
      }
    }
  }
  if (h == 0x9e3779b9u || acc[0] + sx[1] == 1234.5f) *sink = h + uint32_t(acc[1]);
}

// Levels 5-8 (see the file comment). SCALES: a 4-byte scale per 16 bytes;
// RING: register ring instead of batches of 4; BLOCKED: CTA-contiguous order.
template <bool SCALES, bool RING, bool BLOCKED>
__global__ void __launch_bounds__(256, 4)
    w4a16_probe_gemv_kernel(const uint4* w, size_t n16, const uint4* x, const uint32_t* sc, uint32_t* sink) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, out[4] = {0.f, 0.f, 0.f, 0.f};
  // The j-th 16-byte piece of this lane (warp-uniform count).
  size_t count, base, step;
  if (BLOCKED) {  // CTA b: [b n / grid, (b + 1) n / grid) in 4 KB steps (256 pieces), warp w: piece 32w +
                  // lane
    const size_t per = n16 / gridDim.x / 256 * 256;
    base = blockIdx.x * per + warp * 32 + lane;
    step = 256;
    count = per / 256;
  } else {  // grid-stride
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    base = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    step = stride;
    count = n16 / stride;
  }
  auto piece = [&](size_t j) { return w + base + j * step; };
  auto scale = [&](size_t j) { return sc + (base + j * step) / 8; };
  auto compute = [&](const uint4& v, uint32_t s, size_t j) {
    const size_t xo = (j * 8 + (lane % 4) * 2) & 511;
    const uint4 xq0 = device::ptx::ld_cached_v4(x + xo), xq1 = device::ptx::ld_cached_v4(x + xo + 1);
    const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t a[4];
      layout::int4x8_to_bf16(wd[i], a);
      const uint4& q = i < 2 ? xq0 : xq1;
      const uint32_t b[2] = {i % 2 == 0 ? q.x : q.z, i % 2 == 0 ? q.y : q.w};
      device::ptx::mma_m16n8k16_bf16(acc, a, b);
    }
    if (SCALES) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&s));
#pragma unroll
      for (int e = 0; e < 4; ++e) out[e] = fmaf(e < 2 ? f.x : f.y, acc[e], out[e]);
    }
  };
  if (!RING) {
#pragma unroll 1
    for (size_t j = 0; j + 4 <= count; j += 4) {
      uint4 v[4];
      uint32_t s[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        v[u] = device::ptx::ld_stream_v4(piece(j + u));
        if (SCALES) s[u] = device::ptx::ld_cached_b32(scale(j + u));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) compute(v[u], s[u], j + u);
    }
  } else {
    uint4 v[4];
    uint32_t s[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[u] = device::ptx::ld_stream_v4(piece(u));
      if (SCALES) s[u] = device::ptx::ld_cached_b32(scale(u));
    }
#pragma unroll 1
    for (size_t j = 0; j + 4 <= count; j += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        compute(v[u], s[u], j + u);
        if (j + u + 4 < count) {  // refill after use, as the gemv does
          v[u] = device::ptx::ld_stream_v4(piece(j + u + 4));
          if (SCALES) s[u] = device::ptx::ld_cached_b32(scale(j + u + 4));
        }
      }
    }
  }
  if (acc[0] + out[1] == 1234.5f) *sink = uint32_t(acc[1]);
}

}  // namespace futr::bench
