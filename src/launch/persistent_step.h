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

#include <memory>

#include "launch/decode_ops.h"
#include "launch/w4a16.h"

namespace futr::cuda {

class PersistentStep {
 public:
  PersistentStep();
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace futr::cuda
