// TMA (cp.async.bulk.tensor) wrappers: the copy engine moves whole swizzled
// tiles from global to shared memory, described by a CUtensorMap built on the
// host (src/cuda/tensor_map.h) and passed as a __grid_constant__ parameter.
//
// Out-of-bounds box elements (M, N or K tails) are filled with zeros and still
// count toward the mbarrier's transaction bytes: every copy delivers the full box.
#pragma once

#include <cuda.h>  // CUtensorMap (type only: no driver library is linked)

#include <cstdint>

#include "device/ptx/mbarrier.cuh"

namespace futr::device::ptx {

// prefetch.tensormap: pulls the descriptor into the TMA unit's cache before the
// first copy, hiding its fetch latency from the first pipeline stage.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// cp.async.bulk.tensor.2d global->shared with mbarrier completion: one thread
// issues the copy of box (c0 = inner/contiguous coordinate, c1 = row) into
// `dst`; the bytes land as complete_tx on `bar`.
__device__ __forceinline__ void cp_async_bulk_tensor_2d_g2s(void* dst, const CUtensorMap* map,
                                                            int32_t c0, int32_t c1,
                                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

}  // namespace futr::device::ptx
