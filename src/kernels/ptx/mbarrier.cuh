// mbarrier wrappers: the shared-memory transaction barriers that connect the
// TMA producer with the WGMMA consumers in the sm90 GEMM pipeline.
//
// Protocol used by the kernels (one "full" and one "empty" barrier per stage):
//   full[s]  count 1: the producer's arrive.expect_tx plus the TMA copies'
//            complete_tx bytes complete the phase -> stage s holds data.
//   empty[s] count = number of consumer warps: each consumer warp arrives once
//            its WGMMAs reading stage s have retired -> stage s may be refilled.
// Waiters track the phase parity (0, 1, 0, ...) of the barrier they wait on;
// waiting on parity 1 of a fresh barrier returns at once (the "previous" phase
// counts as complete), which lets the producer start without a pre-arrival.
#pragma once

#include <cstdint>

#include "kernels/ptx/smem.cuh"

namespace futr::device::ptx {

// mbarrier.init.shared::cta.b64: sets the expected arrival count of a barrier.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// mbarrier.arrive.expect_tx: arrives once and announces the bytes the TMA
// copies of this phase will deliver (the phase completes when both are in).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// mbarrier.arrive: a consumer warp's release of a stage (count decrement).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// mbarrier.try_wait.parity in a loop: blocks until the phase with `parity`
// has completed. try_wait (not test_wait) lets the hardware suspend the warp
// for a while instead of spinning on the issue slot.
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

}  // namespace futr::device::ptx
