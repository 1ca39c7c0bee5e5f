// Cross-CTA dependency counters and timestamps: the primitives of a kernel
// whose CTAs run several ops in order and wait on each other's results
// (a persistent executor: kernels/work_unit.h CtaCounterDeps).
//
// NOTE: the pattern is message passing at GPU scope. The producer CTA's
// threads write their outputs, meet a CTA barrier, and one thread adds to the
// op's counter with release semantics (red.release.gpu: the CTA's writes,
// ordered before it by the barrier, are visible to whoever observes the
// count). A consumer thread spins with ld.acquire.gpu until the count is
// reached; the CTA barrier after it orders the other threads' later loads after the
// acquire. Loads of data written in the same grid must be coherent ones
// (ld.global, not the non-coherent .nc path, which may return a stale line).
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// ld.acquire.gpu.u32: reads a counter; why acquire: the loads after it see
// what the producers wrote before their release.
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// red.release.gpu.add.u32: adds to a counter without reading it back; why
// release: the writes ordered before it are visible to an acquiring reader
// that sees the new count.
__device__ __forceinline__ void red_release_gpu_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// atom.acq_rel.gpu.add.u32: adds and returns the old count (the last arrival
// of a group learns it is last, and sees everyone's writes).
__device__ __forceinline__ uint32_t atom_acq_rel_gpu_add(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// st.relaxed.gpu.u32: re-arms a counter (after the last reader of the launch).
__device__ __forceinline__ void st_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// nanosleep: backs a spinning thread off; why: fewer polls of the counter's
// L2 line while the producers run.
__device__ __forceinline__ void nanosleep(uint32_t ns) { asm volatile("nanosleep.u32 %0;\n" ::"r"(ns)); }

// %globaltimer: the GPU's nanosecond clock, the same on every SM (per-unit
// timestamps of a persistent step; %clock64 counts per SM).
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

}  // namespace futr::device::ptx
