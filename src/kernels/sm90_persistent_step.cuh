// sm90_persistent_step: a list of decode ops run by ONE launch. A grid of
// co-resident CTAs (at most what fits on the SMs at once) walks the ops in
// order; CTA c runs units c, c + gridDim.x, ... of each op, calling the same
// work-unit bodies the launch executor's kernels wrap (kernels/work_unit.h),
// so a unit computes the same bits under either executor.
//
//   for op i = 0 .. n_ops - 1:
//     for each unit u of op i owned by this CTA:
//       body(op i, u) with CtaCounterDeps{&done[i - 1], units of op i - 1}
//       (the body streams its weights, then waits for op i - 1's units)
//       barrier; thread 0: red.release.gpu done[i] += 1
//   barrier; thread 0: the CTA's arrival on done[n_ops]; the last CTA to
//   arrive re-arms done[0 .. n_ops] to zero (the next launch, a CUDA graph
//   replay, starts from zero)
//
// Why it cannot deadlock: every CTA is resident (the launcher sizes the grid
// by the occupancy), and a CTA waiting in op i waits only for units of op
// i - 1, each owned by a CTA that has reached op i - 1 or earlier and itself
// waits only for earlier ops.
//
// Activations written by an earlier op of the same launch are read with
// coherent loads (CtaCounterDeps::act_v4); the weights keep the streaming path.
//
// Ops of this version: RMSNorm (residual add or not), SwiGLU and the one-row
// W4A16 gemv (group 128 or 64, one tile per warp, a 4-chunk ring; plain,
// SwiGLU or fused RMSNorm input: the norm's loads are coherent ones). 256 threads, the common block shape
// (work_unit.h). Each op's parameters are the launchers' own (launch/persistent_step.h builds them).
//
// Shared memory (dynamic, one allocation): [0, 128) the small per-unit
// pieces (the norm's and the gemv's warp sums, the split-K verdict), two op
// slots, then the gemv's x slice and scales (128-byte aligned).
//
// A second kernel, sm90_persistent_ring_kernel (below), runs lists of gemvs
// only with a producer warp that streams the weights through a shared-memory
// ring ahead of the units (sm90_w4a16_gemv_ring.cuh). Both record per-unit
// timestamps when asked (PersistentUnitTimes: where a step's time goes).
//
// Test: tests/kernels/persistent_step_test.cpp.
#pragma once

#include <cstdint>

#include "kernels/ptx/cp_async.cuh"
#include "kernels/ptx/fence.cuh"
#include "kernels/sm90_rmsnorm.cuh"
#include "kernels/sm90_swiglu.cuh"
#include "kernels/sm90_w4a16_gemv.cuh"
#include "kernels/sm90_w4a16_gemv_ring.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

enum class PersistentKind : int32_t { kRmsNorm, kSwiglu, kGemvG128, kGemvG64 };

inline constexpr int kPersistentThreads = 256;
inline constexpr int kPersistentSmallSmem = 128;  // the units' small pieces
inline constexpr int kPersistentOpSmem = 640;     // two op slots (2 x 288 bytes), 128-byte padded

// One op of the list. params holds the op's parameter struct (RmsNormParams,
// SwigluParams or DecodeParams), copied by the launcher.
struct PersistentOp {
  PersistentKind kind;
  int32_t units;       // the op's units (the launch executor's CTAs)
  int32_t nx, ny;      // gemv: the unit grid (column groups x K splits); others: units x 1
  int32_t first_unit;  // the op's first unit in the list's numbering (the timestamps' index)
  alignas(16) unsigned char params[256];
};
static_assert(sizeof(DecodeParams) <= 256 && sizeof(RmsNormParams) <= 256 && sizeof(SwigluParams) <= 256,
              "an op's parameters fit PersistentOp::params");
static_assert(sizeof(PersistentOp) % 16 == 0 && 2 * sizeof(PersistentOp) <= kPersistentOpSmem,
              "two op slots, copied in 16-byte pieces");

struct PersistentStepParams {
  const PersistentOp* ops = nullptr;  // [n_ops] device
  int n_ops = 0;
  uint32_t* done = nullptr;  // [n_ops + 1] finished units per op, then the CTAs' final arrivals; zero
                             // between launches (each launch leaves them zero)
  // The weight ring (sm90_persistent_ring_kernel only): its offset in the
  // dynamic shared memory (128-byte aligned, after the largest gemv's x slice
  // and scales) and its stages of kRingStageBytes.
  uint32_t ring_offset = 0;
  int ring_stages = 0;
  // Per-unit timestamps (globaltimer ns), or null: [units of all ops] (PersistentUnitTimes).
  PersistentUnitTimes* times = nullptr;
};

// The stamps of unit u of op `op`, or null when the launch records none.
__device__ __forceinline__ PersistentUnitTimes* unit_times(const PersistentStepParams& sp,
                                                           const PersistentOp& op, int u) {
  return sp.times ? sp.times + op.first_unit + u : nullptr;
}
// Op i of the list into shared-memory slot i % 2 (cp.async by the first
// threads, one commit group per call, empty past the end of the list).
__device__ __forceinline__ void fetch_op(const PersistentStepParams& sp, PersistentOp* slots, int i) {
  constexpr int kOpPieces = int(sizeof(PersistentOp) / 16);
  if (i < sp.n_ops && int(threadIdx.x) < kOpPieces)
    ptx::cp_async_16_cg(reinterpret_cast<uint4*>(slots + (i & 1)) + threadIdx.x,
                        reinterpret_cast<const uint4*>(sp.ops + i) + threadIdx.x);
  ptx::cp_async_commit();
}

__device__ __forceinline__ void stamp(uint64_t* t) {
  if (t && threadIdx.x == 0) *t = ptx::globaltimer();
}

template <class P>
__device__ __forceinline__ const P& op_params(const PersistentOp& op) {
  return *reinterpret_cast<const P*>(op.params);
}

// The list's op i + 1 is copied into shared memory (cp.async, one slot of
// two) while op i runs: a unit's body reads its parameters from there, not
// from global memory. kGemvOnly: a list of gemv ops only, compiled without
// the other bodies at the gemv's own register budget (64: four CTAs per SM,
// as its launch); else 128 registers (the RMSNorm body needs them), two CTAs
// per SM.
template <bool kGemvOnly>
__global__ void __launch_bounds__(kPersistentThreads, kGemvOnly ? 4 : 2)
    sm90_persistent_step_kernel(const PersistentStepParams sp) {
  extern __shared__ __align__(128) uint8_t persistent_smem[];
  float* const part = reinterpret_cast<float*>(persistent_smem);             // [8]
  uint32_t* const last = reinterpret_cast<uint32_t*>(persistent_smem + 64);  // the split-K verdict
  PersistentOp* const slots = reinterpret_cast<PersistentOp*>(persistent_smem + kPersistentSmallSmem);  // [2]
  uint4* const xs = reinterpret_cast<uint4*>(persistent_smem + kPersistentSmallSmem + kPersistentOpSmem);
  auto fetch = [&](int i) { fetch_op(sp, slots, i); };

  fetch(0);
  uint32_t before_units = 0;  // the units of the op before
  for (int i = 0; i < sp.n_ops; ++i) {
    fetch(i + 1);
    ptx::cp_async_wait<1>();  // this thread's pieces of op i have landed
    __syncthreads();          // ... and every thread's
    const PersistentOp& op = slots[i & 1];
    const PersistentKind kind = op.kind;
    const int units = op.units;
    for (int u = int(blockIdx.x); u < units; u += int(gridDim.x)) {
      PersistentUnitTimes* const t = unit_times(sp, op, u);
      stamp(t ? &t->start : nullptr);
      const CtaCounterDeps<> deps{i > 0 ? sp.done + (i - 1) : nullptr, before_units, t ? &t->ready : nullptr};
      switch (kind) {
        case PersistentKind::kRmsNorm:
          if constexpr (!kGemvOnly)
            rmsnorm_unit(op_params<RmsNormParams>(op), u, units, *reinterpret_cast<RmsNormSmem*>(part), deps);
          break;
        case PersistentKind::kSwiglu:
          if constexpr (!kGemvOnly) swiglu_unit(op_params<SwigluParams>(op), u, units, deps);
          break;
        case PersistentKind::kGemvG128:
          w4a16_gemv_unit<128, 1, 4, 1>(op_params<DecodeParams>(op), LinearUnit(unsigned(u), op.nx, op.ny),
                                        units, W4a16Smem{part, last}, xs, deps);
          break;
        case PersistentKind::kGemvG64:
          w4a16_gemv_unit<64, 1, 4, 1>(op_params<DecodeParams>(op), LinearUnit(unsigned(u), op.nx, op.ny),
                                       units, W4a16Smem{part, last}, xs, deps);
          break;
      }
      __syncthreads();  // the unit's writes are done (and its shared memory free for the next unit)
      stamp(t ? &t->end : nullptr);
      if (threadIdx.x == 0) {
        __threadfence();
        ptx::red_release_gpu_add(sp.done + i, 1u);
      }
    }
    before_units = uint32_t(units);
    __syncthreads();  // every thread is done with slot i % 2 before fetch(i + 2) refills it
  }
  ptx::cp_async_wait<0>();
  // Re-arm: the last CTA to arrive zeroes the counters (every other CTA has
  // finished every op by then, so no one reads them again in this launch).
  if (threadIdx.x == 0) {
    const uint32_t before = ptx::atom_acq_rel_gpu_add(sp.done + sp.n_ops, 1u);
    if (before == gridDim.x - 1)
      for (int i = 0; i <= sp.n_ops; ++i) ptx::st_relaxed_gpu(sp.done + i, 0u);
  }
}

// The gemv-only list with its weights through a ring (sm90_w4a16_gemv_ring.cuh):
// warps 0..7 run the units as above (their barrier: ConsumerBarrier), warp 8
// is the producer, whose lane 0 walks the same units of this CTA in the same
// order and copies their weight chunks into the ring as stages free up,
// running ahead of the consumers across op boundaries (the dependency waits
// hold back the consumers only). The ring takes the shared memory the gemv's
// x slice leaves.
//
// Shared memory: [0, 128) small pieces, two op slots, the ring's barriers
// (full then empty, kPersistentRingMaxStages each), the x slice and scales,
// then the ring at sp.ring_offset.
inline constexpr int kPersistentRingThreads = 288;  // 8 consumer warps + the producer warp
inline constexpr int kPersistentRingMaxStages = 64;
inline constexpr int kPersistentRingBarSmem = 2 * 8 * kPersistentRingMaxStages;
inline constexpr int kPersistentRingFixedSmem =
    kPersistentSmallSmem + kPersistentOpSmem + kPersistentRingBarSmem;
static_assert(kPersistentRingFixedSmem % 128 == 0, "the x slice starts 128-byte aligned");
inline constexpr int kPersistentRingCtasPerSm[] = {1, 2, 3, 4};  // the kernel's instances

// kCtasPerSm: the CTAs per SM the kernel is compiled for (registers:
// 65536 / (288 kCtasPerSm)); each CTA's ring takes its share of the SM's shared
// memory. Several CTAs per SM overlap one unit's fixed latencies (its scales,
// its x slice, the split-K arrival) with another's: the instances are
// kPersistentRingCtasPerSm.
template <int kCtasPerSm>
__global__ void __launch_bounds__(kPersistentRingThreads, kCtasPerSm)
    sm90_persistent_ring_kernel(const PersistentStepParams sp) {
  extern __shared__ __align__(128) uint8_t persistent_smem[];
  float* const part = reinterpret_cast<float*>(persistent_smem);             // [8]
  uint32_t* const last = reinterpret_cast<uint32_t*>(persistent_smem + 64);  // the split-K verdict
  PersistentOp* const slots = reinterpret_cast<PersistentOp*>(persistent_smem + kPersistentSmallSmem);  // [2]
  uint64_t* const bars =
      reinterpret_cast<uint64_t*>(persistent_smem + kPersistentSmallSmem + kPersistentOpSmem);
  uint4* const xs = reinterpret_cast<uint4*>(persistent_smem + kPersistentRingFixedSmem);
  WeightRing ring{persistent_smem + sp.ring_offset, bars, bars + kPersistentRingMaxStages, sp.ring_stages};
  if (threadIdx.x == 0) {
    for (int s = 0; s < ring.n; ++s) {
      ptx::mbarrier_init(ring.full + s, 1);
      ptx::mbarrier_init(ring.empty + s, ConsumerBarrier::kThreads);
    }
    ptx::fence_mbarrier_init_release_cluster();
  }
  __syncthreads();  // the last barrier of all 288 threads

  if (threadIdx.x >= ConsumerBarrier::kThreads) {  // the producer warp
    if (threadIdx.x == ConsumerBarrier::kThreads)
      for (int i = 0; i < sp.n_ops; ++i) {
        const PersistentOp& op = sp.ops[i];
        for (int u = int(blockIdx.x); u < op.units; u += int(gridDim.x))
          gemv_ring_produce(op_params<DecodeParams>(op), LinearUnit(unsigned(u), op.nx, op.ny), ring,
                            unit_times(sp, op, u));
      }
    return;
  }

  auto fetch = [&](int i) { fetch_op(sp, slots, i); };
  fetch(0);
  uint32_t before_units = 0;
  for (int i = 0; i < sp.n_ops; ++i) {
    fetch(i + 1);
    ptx::cp_async_wait<1>();
    ConsumerBarrier::sync();
    const PersistentOp& op = slots[i & 1];
    const PersistentKind kind = op.kind;
    const int units = op.units;
    for (int u = int(blockIdx.x); u < units; u += int(gridDim.x)) {
      const LinearUnit unit(unsigned(u), op.nx, op.ny);
      PersistentUnitTimes* const t = unit_times(sp, op, u);
      stamp(t ? &t->start : nullptr);
      const CtaCounterDeps<ConsumerBarrier> deps{i > 0 ? sp.done + (i - 1) : nullptr, before_units,
                                                 t ? &t->ready : nullptr};
      uint64_t* const computed = t ? &t->computed : nullptr;
      if (kind == PersistentKind::kGemvG128)
        w4a16_gemv_ring_unit<128>(op_params<DecodeParams>(op), unit, W4a16Smem{part, last}, xs, ring, deps,
                                  computed);
      else
        w4a16_gemv_ring_unit<64>(op_params<DecodeParams>(op), unit, W4a16Smem{part, last}, xs, ring, deps,
                                 computed);
      ConsumerBarrier::sync();
      stamp(t ? &t->end : nullptr);
      if (threadIdx.x == 0) {
        __threadfence();
        ptx::red_release_gpu_add(sp.done + i, 1u);
      }
    }
    before_units = uint32_t(units);
    ConsumerBarrier::sync();
  }
  ptx::cp_async_wait<0>();
  if (threadIdx.x == 0) {
    const uint32_t before = ptx::atom_acq_rel_gpu_add(sp.done + sp.n_ops, 1u);
    if (before == gridDim.x - 1)
      for (int i = 0; i <= sp.n_ops; ++i) ptx::st_relaxed_gpu(sp.done + i, 0u);
  }
}

}  // namespace futr::device
