// The persistent executor's launcher: a list of decode ops, each given with
// its own launcher's arguments (launch/decode_ops.h, launch/w4a16.h), run by
// ONE launch of sm90_persistent_step_kernel (kernels/sm90_persistent_step.cuh):
// co-resident CTAs walk the ops in order, each op's units waiting on the op
// before through a dependency counter, the same work-unit bodies as the
// launch executor's kernels (the same bits).
//
// Ops of this version: rmsnorm (residual add or embedding gather), swiglu and
// the one-row INT4 gemv (plain, SwiGLU or fused RMSNorm input; group 128 or
// 64). The list is
// built once and uploaded at the first launch; a launch re-arms its counters,
// so the same launch can be captured into a CUDA graph and replayed.
//
// Test: tests/kernels/persistent_step_test.cpp (the list against the same
// launches one by one, bit for bit; poisoned outputs; graph replays).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "launch/decode_ops.h"
#include "launch/w4a16.h"

namespace futr::cuda {

// How the gemv units of a gemv-only list get their weights: each unit
// streams its own into registers, the first chunks before its dependency
// wait (kRegisters: sm90_persistent_step_kernel, four CTAs per SM), or a
// producer warp per CTA copies them into a shared-memory ring ahead of the
// units, across op boundaries (kRing: sm90_persistent_ring_kernel, 1-4 CTAs
// per SM). The same bits either way; a list with other ops runs the register
// kernel. Which is faster depends on the shape (docs/PERF.md, persistent
// step): the ring at SmolLM2's, the registers at the 8B's.
enum class PersistentWeights { kRegisters, kRing };

class PersistentStep {
 public:
  // ring_ctas_per_sm: the ring kernel's CTAs per SM (1, 2, 3 or 4; 0: the default, kDefaultRingCtasPerSm).
  explicit PersistentStep(PersistentWeights weights = PersistentWeights::kRegisters,
                          int ring_ctas_per_sm = 0);
  static constexpr int kDefaultRingCtasPerSm = 4;
  ~PersistentStep();
  PersistentStep(const PersistentStep&) = delete;
  PersistentStep& operator=(const PersistentStep&) = delete;

  // Ops in run order, checked as their launchers check them.
  void rmsnorm(const RmsNormArgs& a);
  void swiglu(const void* gu, void* out, int rows, int I);
  // The one-row INT4 gemv (c: the gemv with one tile per warp and a 4-chunk
  // ring, as decode_heuristic picks at M = 1), with any of its inputs: plain,
  // the SwiGLU of a gate|up row, or the fused residual add + RMSNorm.
  void gemm(const DecodeArgs& a, const DecodeConfig& c);

  // Runs the list on `s` with `ctas` CTAs (0: as many as fit on the GPU at
  // once; more is refused: the CTAs wait on each other, so all must be
  // resident). The first launch uploads the list; ops added later are refused.
  void launch(cudaStream_t s, int ctas = 0);

  int size() const;           // ops in the list
  int resident_ctas() const;  // CTAs that fit on the GPU at once (needs a GPU)
  // Per-unit device timestamps (globaltimer ns) of every launch from now on
  // (before the first launch): times()[op][unit] after a launch has finished.
  // Fields: start, the end of the dependency wait (ready), the end of the
  // sums (computed: the ring kernel), end; the producer warp's first and last
  // copy of the unit's weights (the ring kernel). 0 where not recorded.
  struct UnitTimes {
    uint64_t start, ready, computed, end, produce_first, produce_last;
  };
  void record_times();
  std::vector<std::vector<UnitTimes>> times(cudaStream_t s) const;

  bool ring() const;        // the list runs the ring kernel
  int ring_stages() const;  // its ring's stages per CTA (0: the register kernel; needs a GPU)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace futr::cuda
