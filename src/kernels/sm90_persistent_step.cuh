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
// Test: tests/kernels/persistent_step_test.cpp.
#pragma once

#include <cstdint>

#include "kernels/ptx/cp_async.cuh"
#include "kernels/sm90_rmsnorm.cuh"
#include "kernels/sm90_swiglu.cuh"
#include "kernels/sm90_w4a16_gemv.cuh"
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
  int32_t units;   // the op's units (the launch executor's CTAs)
  int32_t nx, ny;  // gemv: the unit grid (column groups x K splits); others: units x 1
  int32_t pad;
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
};

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
  constexpr int kOpPieces = int(sizeof(PersistentOp) / 16);
  auto fetch = [&](int i) {  // op i into slot i % 2; one commit group (empty past the end)
    if (i < sp.n_ops && int(threadIdx.x) < kOpPieces)
      ptx::cp_async_16_cg(reinterpret_cast<uint4*>(slots + (i & 1)) + threadIdx.x,
                          reinterpret_cast<const uint4*>(sp.ops + i) + threadIdx.x);
    ptx::cp_async_commit();
  };

  fetch(0);
  uint32_t before_units = 0;  // the units of the op before
  for (int i = 0; i < sp.n_ops; ++i) {
    fetch(i + 1);
    ptx::cp_async_wait<1>();  // this thread's pieces of op i have landed
    __syncthreads();          // ... and every thread's
    const PersistentOp& op = slots[i & 1];
    const PersistentKind kind = op.kind;
    const int units = op.units;
    const CtaCounterDeps deps{i > 0 ? sp.done + (i - 1) : nullptr, before_units};
    for (int u = int(blockIdx.x); u < units; u += int(gridDim.x)) {
      switch (kind) {
        case PersistentKind::kRmsNorm:
          if constexpr (!kGemvOnly)
            rmsnorm_unit(op_params<RmsNormParams>(op), u, units, *reinterpret_cast<RmsNormSmem*>(part), deps);
          break;
        case PersistentKind::kSwiglu:
          if constexpr (!kGemvOnly) swiglu_unit(op_params<SwigluParams>(op), u, units, deps);
          break;
        case PersistentKind::kGemvG128:
          w4a16_gemv_unit<128, 1, 4>(op_params<DecodeParams>(op), LinearUnit(unsigned(u), op.nx, op.ny),
                                     units, W4a16Smem{part, last}, xs, deps);
          break;
        case PersistentKind::kGemvG64:
          w4a16_gemv_unit<64, 1, 4>(op_params<DecodeParams>(op), LinearUnit(unsigned(u), op.nx, op.ny), units,
                                    W4a16Smem{part, last}, xs, deps);
          break;
      }
      __syncthreads();  // the unit's writes are done (and its shared memory free for the next unit)
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

}  // namespace futr::device
