// TMA (cp.async.bulk.tensor) wrappers: the copy engine moves whole swizzled
// tiles from global to shared memory, described by a CUtensorMap built on the
// host (src/launch/tensor_map.h) and passed as a __grid_constant__ parameter.
//
// Out-of-bounds box elements (M, N or K tails) are filled with zeros and still
// count toward the mbarrier's transaction bytes: every copy delivers the full box.
#pragma once

#include <cuda.h>  // CUtensorMap (type only: no driver library is linked)

#include <cstdint>

#include "kernels/ptx/mbarrier.cuh"

namespace futr::device::ptx {

// prefetch.tensormap: pulls the descriptor into the TMA unit's cache before the
// first copy, hiding its fetch latency from the first pipeline stage.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// cp.async.bulk.tensor.2d global->shared with mbarrier completion: one thread
// issues the copy of box (c0 = inner/contiguous coordinate, c1 = row) into
// `dst`; the bytes land as complete_tx on `bar`.
__device__ __forceinline__ void cp_async_bulk_tensor_2d_g2s(void* dst, const CUtensorMap* map, int32_t c0,
                                                            int32_t c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// cp.async.bulk (1D, no tensor map) global->shared with mbarrier completion:
// one thread copies `bytes` (multiple of 16, both addresses 16-byte aligned)
// of a contiguous run; why: a CTA's weight stage of the decode GEMM is one
// contiguous run (layout/int4_fragment.cuh), so the copy engine fills the
// ring and no register or issue slot of the consumers holds bytes in flight.
__device__ __forceinline__ void cp_async_bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// cp.async.bulk.prefetch.L2: asks the copy engine to pull `bytes` (multiple of
// 16, 16-byte aligned source) into L2 without a destination or completion, so
// that later ordinary loads of that range hit L2 (epilogue residual reads).
__device__ __forceinline__ void cp_async_bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(reinterpret_cast<uint64_t>(src)),
               "r"(bytes)
               : "memory");
}

// prefetch.global.L2: one thread's hint to pull a 128-byte line into L2 (the
// per-thread form, issued by the load/store unit). NOTE: not TMA, but it lives
// here beside the bulk form: the epilogue uses it instead of
// cp.async.bulk.prefetch.L2, whose 64 small requests per warpgroup and tile
// queued in the TMA unit behind the main loop's tile loads and slowed them
// (docs/PERF.md, FP8 GEMM v2).
__device__ __forceinline__ void prefetch_global_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(reinterpret_cast<uint64_t>(p)) : "memory");
}

}  // namespace futr::device::ptx
