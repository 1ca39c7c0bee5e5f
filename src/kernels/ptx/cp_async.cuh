// cp.async (sm_80+): asynchronous global -> shared copies that bypass the
// registers. The skinny decode kernel uses them as a lane-private ring: each
// lane copies its own weight fragments S blocks ahead and later reads back only
// what it copied, so bytes in flight are bounded by shared memory, not by
// registers, and no barrier is needed (wait_group orders a lane's own copies).
#pragma once

#include <cstdint>

#include "kernels/ptx/smem.cuh"

namespace futr::device::ptx {

// cp.async.cg.shared.global 16 B; why: L2-only (weights are read once), 16 B
// is the widest copy and the one .cg allows.
__device__ __forceinline__ void cp_async_16_cg(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem)
               : "memory");
}

// cp.async.ca.shared.global 8 / 4 B; why: group scales are 4 or 8 bytes per
// lane, below .cg's 16-byte minimum.
__device__ __forceinline__ void cp_async_8_ca(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_4_ca(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}

// cp.async.mbarrier.arrive.noinc: the barrier receives one arrival once all
// of this thread's earlier cp.async copies have landed (counted in the
// barrier's expected arrivals: .noinc); why: lets a producer warp's small
// per-lane copies (group scales) complete the same stage barrier as its bulk copy.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// cp.async.commit_group: closes the copies issued so far into one group.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// cp.async.wait_group N: waits until at most N of this thread's groups are
// still in flight; why: the oldest stage of the ring has landed.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace futr::device::ptx
