// Global-memory loads with explicit cache behaviour.
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// ld.global.nc.L1::no_allocate.L2::256B.v4: 16 bytes of read-once weights;
// why: weights are streamed exactly once per step, so they must not evict the
// activations from L1, and the 256-byte L2 prefetch keeps DRAM bursts long.
__device__ __forceinline__ uint4 ld_stream_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// ld.global.nc.L1::no_allocate.v2: the 8-byte tail-block variant of ld_stream_v4.
__device__ __forceinline__ uint2 ld_stream_v2(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// ld.global.nc.v4: 16 bytes of activations; why: the same activations are
// read by every CTA and by all warps of a CTA, so they should stay in L1.
__device__ __forceinline__ uint4 ld_cached_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// ld.global.v4: 16 bytes of activations written by another CTA of the same
// grid (a persistent executor's op before); why not .nc: the non-coherent
// path may serve a stale line, the coherent one is ordered after the acquire
// of the dependency counter (ptx/sync.cuh).
__device__ __forceinline__ uint4 ld_coherent_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// ld.global.nc.b32 / .v2: group scales (small, re-read by the lanes of a quad).
__device__ __forceinline__ uint32_t ld_cached_b32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_cached_v2(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// ld.global.cg.v2.f32: split-K partial sums written by other CTAs of the same
// launch; why: .cg reads L2 (the coherence point), never a stale L1 line.
__device__ __forceinline__ float2 ld_l2_f2(const float* p) {
  float2 v;
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
  return v;
}

// ld.global.cg.f32: one split-K partial (see ld_l2_f2).
__device__ __forceinline__ float ld_l2_f32(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace futr::device::ptx
