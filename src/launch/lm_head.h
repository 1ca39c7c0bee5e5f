// Launcher of the decode step's LM head (src/kernels/sm90_lm_head.cuh): the
// logits of M = 1..32 BF16 rows against the BF16 (or INT4) head matrix, FP32 out, our
// streaming kernel (the alternative to cuBLASLt's BF16 GEMM, launch/cublaslt.h).
// Batch invariant: a row's logits do not depend on M or on the other rows.
// Graph-capturable. `pdl`: launched as a programmatic dependent (its weight
// loads start before griddepcontrol.wait). Reference: reference/lm_head_ref.h.
// Test: tests/kernels/lm_head_test.cpp. Benchmark: bench/lm_head_bench.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace futr::cuda {

inline constexpr int kLmHeadMaxRows = 32;

struct LmHeadArgs {
  const void* w = nullptr;  // [n][k] BF16 device, 16-byte aligned; INT4 head: n k / 2 bytes, fragment order
  const void* x = nullptr;  // [m][k] BF16 device, 16-byte aligned
  float* out = nullptr;     // [m][ld] FP32 device
  int64_t ld = 0;           // 0: n
  int m = 0, n = 0, k = 0;  // m in 0..32 (0: nothing), k % 64 == 0
  // The INT4 head (quant::pack_int4's fragment order, as cuda::W4Linear holds
  // it): its FP16 scales, fragment order, and its group (128, or 64); scales
  // null: a BF16 head.
  const void* scales = nullptr;
  int group = 128;
};

// Why the kernel cannot run a head of this shape ("" if it can); int4_group:
// the INT4 head's group (128 or 64), 0 for a BF16 head.
const char* lm_head_unsupported(int n, int k, int int4_group = 0);

void lm_head(const LmHeadArgs& a, cudaStream_t s, bool pdl = false);

// The compiled variant for m rows: "bf16 mt=<row tiles> loads=<chunks in flight>" (or "int4 g128 ...").
const char* lm_head_describe(int m, int int4_group = 0);

}  // namespace futr::cuda
