// sm90_fp8_quantize: the FP8 input of a prefill GEMM from a BF16 activation,
// with delayed scaling (quant/delayed_scaling.h has the contract), one team of
// `team` threads per row (32..256, a whole number of warps; 256 / team rows
// per CTA, so narrow rows do not leave most of a CTA idle):
//
//   y   = x                                         (plain: the attention output before O)
//   y   = bf16(x * r),  r = 1 / sqrt(sum_k x_k^2 / K + eps)   (folded RMSNorm, "normalize in the
//                                                    cast": the gain is in the next GEMM's weights)
//   q   = e4m3_satfinite(y * (1 / s))               (RNE; s = the site's scale, read once)
//   amax     = max(amax, max |y|)                   (the site's call record: one atomicMax per CTA
//   saturated += #{ |y / s| > 448 }                  on the bits of a non-negative float, atomicAdd)
//   nonfinite += #{ y not finite }
//
// The scale s of this call was chosen from earlier calls only (the kernel
// never reads what it records), so results are deterministic given the state;
// sm90_fp8_scale_update then turns the record into the next call's scale.
// The same arithmetic as the CPU reference (cpu::Fp8Linear::quantize_input,
// variant rms_in_cast): 1 / s and 1 / sqrt are IEEE-rounded (no fast math);
// the row's sum of squares is an FP32 reduction in a fixed order for a given
// team (the reference sums in float64: r may differ by an ulp).
// The call record is reduced over the CTA first: one atomic per CTA and
// counter, not one per warp (thousands of warps on one address serialize in L2).
// Limits: K % 8 == 0 (16-byte loads) and K <= 64 * team (8 loads of 8 values per
// thread, the row staged in registers); team from fp8_quantize_team().
// Launcher: src/launch/fp8_scaling.cu. Test: tests/kernels/fp8_scaling_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/layout/fp8_site.cuh"
#include "kernels/ptx/pdl.cuh"

namespace futr::device {

using layout::Fp8SiteState;

struct Fp8QuantizeParams {
  const uint16_t* x = nullptr;  // [rows][ld_x] BF16
  int64_t ld_x = 0;
  uint8_t* out = nullptr;  // [rows][ld_out] E4M3
  int64_t ld_out = 0;
  int rows = 0;
  int K = 0;
  bool fold_rms = false;  // y = bf16(x * r) (folded RMSNorm), else y = x
  float eps = 1e-5f;
  Fp8SiteState* site = nullptr;
};

inline constexpr int kFp8QuantThreads = 256;
inline constexpr int kFp8QuantPer = 8;                                     // 16-byte chunks per thread
inline constexpr int kFp8QuantMaxK = 8 * kFp8QuantPer * kFp8QuantThreads;  // 16384

// Threads per row for K: the smallest whole number of warps (a power of two)
// whose kFp8QuantPer chunks per thread cover the row.
__host__ __device__ constexpr int fp8_quantize_team(int K) {
  int t = 32;
  while (t < kFp8QuantThreads && 8 * kFp8QuantPer * t < K) t *= 2;
  return t;
}

__global__ void __launch_bounds__(kFp8QuantThreads)
    sm90_fp8_quantize_kernel(const Fp8QuantizeParams p, int team) {
  constexpr int kWarps = kFp8QuantThreads / 32;
  __shared__ float part[kWarps];
  __shared__ float red_amax[kWarps];
  __shared__ uint32_t red_sat[kWarps], red_bad[kWarps];
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();  // x and the site's scale come from the kernels before
  const int rows_per_cta = kFp8QuantThreads / team;
  const int t = threadIdx.x % team, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * rows_per_cta + threadIdx.x / team;
  const bool live = row < p.rows;
  const uint16_t* x = p.x + size_t(live ? row : 0) * size_t(p.ld_x);
  uint4 c[kFp8QuantPer];
#pragma unroll
  for (int i = 0; i < kFp8QuantPer; ++i) {
    const int j = 8 * (t + i * team);
    if (live && j < p.K) c[i] = *reinterpret_cast<const uint4*>(x + j);
  }
  float r = 1.f;
  if (p.fold_rms) {
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kFp8QuantPer; ++i) {
      if (!live || 8 * (t + i * team) >= p.K) continue;
      const uint32_t w[4] = {c[i].x, c[i].y, c[i].z, c[i].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float a = __uint_as_float(w[e] << 16), b = __uint_as_float(w[e] & 0xffff0000u);
        ss = fmaf(a, a, ss);
        ss = fmaf(b, b, ss);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    const int w0 = (threadIdx.x / team) * (team / 32);  // the team's first warp
    float tot = 0.f;
    for (int w = 0; w < team / 32; ++w) tot += part[w0 + w];
    r = 1.f / sqrtf(tot / float(p.K) + p.eps);  // IEEE sqrt and division, as the reference
  }
  const float inv = 1.f / p.site->scale;  // the epilogues' qscale = 1 / scale_in
  float amax = 0.f;
  uint32_t sat = 0, bad = 0;
  uint8_t* out = p.out + size_t(live ? row : 0) * size_t(p.ld_out);
#pragma unroll
  for (int i = 0; i < kFp8QuantPer; ++i) {
    const int j = 8 * (t + i * team);
    if (!live || j >= p.K) continue;
    const uint32_t w[4] = {c[i].x, c[i].y, c[i].z, c[i].w};
    uint32_t q[2];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float a = __uint_as_float(w[e] << 16), b = __uint_as_float(w[e] & 0xffff0000u);
      if (p.fold_rms) {
        a = __bfloat162float(__float2bfloat16_rn(a * r));
        b = __bfloat162float(__float2bfloat16_rn(b * r));
      }
      bad += uint32_t(!isfinite(a)) + uint32_t(!isfinite(b));
      amax = fmaxf(amax, fmaxf(fabsf(a), fabsf(b)));  // fmaxf drops NaN: counted in `bad`
      const float qa = a * inv, qb = b * inv;
      sat += uint32_t(fabsf(qa) > 448.f) + uint32_t(fabsf(qb) > 448.f);
      const uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(qa, qb), __NV_SATFINITE, __NV_E4M3);
      if (e % 2 == 0) q[e / 2] = pair;
      else q[e / 2] |= pair << 16;
    }
    *reinterpret_cast<uint2*>(out + j) = make_uint2(q[0], q[1]);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    sat += __shfl_xor_sync(0xffffffffu, sat, o);
    bad += __shfl_xor_sync(0xffffffffu, bad, o);
  }
  if (lane == 0) {
    red_amax[warp] = amax;
    red_sat[warp] = sat;
    red_bad[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      amax = fmaxf(amax, red_amax[w]);
      sat += red_sat[w];
      bad += red_bad[w];
    }
    atomicMax(reinterpret_cast<unsigned int*>(&p.site->amax), __float_as_uint(amax));
    if (sat) atomicAdd(&p.site->saturated, sat);
    if (bad) atomicAdd(&p.site->nonfinite, bad);
  }
}

}  // namespace futr::device
