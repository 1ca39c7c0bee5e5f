// A stand-in for a persistent executor, for tests/kernels/work_unit_test.cpp:
// kernels of `ctas` CTAs that each loop over the op's units (unit
// ctas - 1 - blockIdx.x first, every ctas-th unit after it, so units run in
// another order and several per CTA), calling the work-unit bodies of
// src/kernels/ with shared memory of their own and no-op dependencies (the
// inputs are complete before the launch). The arguments are the launchers'
// (launch/decode_ops.h, launch/lm_head.h).
#pragma once

#include <cuda_runtime.h>

#include "launch/decode_ops.h"
#include "launch/lm_head.h"

namespace futr::test {

void loop_rmsnorm(const cuda::RmsNormArgs& a, int ctas, cudaStream_t s);
void loop_swiglu(const void* gu, void* out, int rows, int I, int units, int ctas, cudaStream_t s);
void loop_logits_reduce(const cuda::LogitsReduceArgs& a, int ctas, cudaStream_t s);
void loop_sample_topk(const cuda::SampleArgs& a, int ctas, cudaStream_t s);
void loop_lm_head(const cuda::LmHeadArgs& a, int ctas, cudaStream_t s);

}  // namespace futr::test
