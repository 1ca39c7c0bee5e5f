// fill_random: deterministic pseudo-random fill of device buffers, so tests and
// benchmarks never run on zeros (zeros hide unwritten outputs and can time
// faster than real data) and need no host-to-device copy of gigabytes.
//
//   value(i) = lo + (hi - lo) * u(i, seed),  u uniform in [0, 1) from a 64-bit hash.
//
// Element types: float, __nv_bfloat16, __half, __nv_fp8_e4m3 (saturating), and
// uint8_t / uint32_t raw bits (uniform over all bit patterns; lo/hi ignored).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace futr::device {

// splitmix64 finaliser: a cheap, well-mixed hash of (index, seed).
__device__ __forceinline__ uint64_t hash64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float uniform01(uint64_t i, uint64_t seed) {
  return float(hash64(i * 0x2545f4914f6cdd1dull + seed) >> 40) * (1.0f / 16777216.0f);
}

template <class T>
__device__ __forceinline__ T make_value(uint64_t i, uint64_t seed, float lo, float hi) {
  const float v = lo + (hi - lo) * uniform01(i, seed);
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return __nv_fp8_e4m3(v);
  else return T(hash64(i * 0x2545f4914f6cdd1dull + seed));  // raw integer bits
}

template <class T>
__global__ void fill_random_kernel(T* out, uint64_t n, uint64_t seed, float lo, float hi) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = make_value<T>(i, seed, lo, hi);
}

}  // namespace futr::device
