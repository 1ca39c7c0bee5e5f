// Fences and named barriers: the ordering primitives the sm90 kernels need
// between ordinary threads, the async proxy (TMA, WGMMA) and mbarrier setup.
//
// NOTE: Hopper has two memory "proxies" for shared memory: the generic proxy
// (ordinary ld/st) and the async proxy (TMA bulk copies, WGMMA operand reads).
// Ordering between them needs an explicit proxy fence; a plain __syncthreads()
// orders generic accesses only.
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// fence.proxy.async.shared::cta: makes this thread's generic-proxy shared-memory
// writes visible to later async-proxy reads (TMA store, WGMMA) and vice versa.
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// fence.mbarrier_init.release.cluster: publishes mbarrier.init results to the
// async proxy (TMA complete_tx) before any thread starts using the barriers.
__device__ __forceinline__ void fence_mbarrier_init_release_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// bar.sync id, n: a barrier among n threads only (one warpgroup's epilogue),
// so the other warpgroups keep running. id 0 is __syncthreads(): use 1..15.
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}

}  // namespace futr::device::ptx
