// Launchers of the decode path's small kernels (the GEMMs are launch/w4a16.h and
// cuBLASLt, attention launch/decode_attention.h): the residual + RMSNorm step
// (with the embedding gather), RoPE in place, SwiGLU, and the logits
// reductions of the step's output rows (argmax, log-sum-exp, log p(target)).
// Graph-capturable. `pdl`: launched as a programmatic dependent of the kernel
// before it (launch/launch.cuh; each kernel waits before it reads activations). Kernels:
// src/kernels/sm90_{rmsnorm,rope,swiglu, logits_reduce,sample_topk}.cuh; their CPU references are
// cpu_engine/ops.h, reference/logits_reduce_ref.h and runtime::Sampler. Tests:
// tests/kernels/decode_ops_test.cpp, tests/kernels/logits_reduce_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace futr::cuda {

struct RmsNormArgs {
  float* x = nullptr;         // [rows][H] FP32 residual, in place
  const void* add = nullptr;  // optional [rows][ld_add] BF16 added to x first
  int64_t ld_add = 0;
  const int* tokens = nullptr;  // optional [rows] ids: x = embd[token] first
  const void* embd = nullptr;   // [vocab][H] BF16
  const void* gain = nullptr;   // [H] BF16
  void* out = nullptr;          // [rows][H] BF16
  int rows = 0, H = 0;
  float eps = 1e-5f;
};
void rmsnorm(const RmsNormArgs& a, cudaStream_t s, bool pdl = false);

// Rotates the first `heads` heads of each BF16 row (stride ld) at its position.
void rope(void* x, int64_t ld, const int* pos, const float* cos, const float* sin, int rows, int heads, int D,
          cudaStream_t s, bool pdl = false);

// out[r] = table[index[r]]: rows of `width` 16-bit elements (the prefill
// path's embedding gather into its BF16 residual). index is a device array;
// its values must lie in [0, table_rows) (the engine checks token ids first).
void gather_rows(const void* table, const int* index, void* out, int rows, int width, cudaStream_t s,
                 bool pdl = false);

// out[rows][I] = bf16(silu(gate) * up) of gu[rows][2I] (gate columns first).
void swiglu(const void* gu, void* out, int rows, int I, cudaStream_t s, bool pdl = false);

// One row's reductions (layout of device::LogitsRowStats; see
// sm90_logits_reduce.cuh for the exact rules on ties, -inf and NaN).
struct LogitsRowStats {
  double lse = 0;      // log sum_i exp(z_i)
  double logprob = 0;  // z[target] - lse (0 without a target)
  float max = 0;       // max_i z_i
  int argmax = 0;      // lowest id reaching max
  int nonfinite = 0;   // NaN or +inf entries
  int pad = 0;
};

struct LogitsReduceArgs {
  const float* logits = nullptr;  // [rows][ld] FP32 device
  int64_t ld = 0;                 // 0: vocab
  int vocab = 0, rows = 0;
  const int* targets = nullptr;   // [rows] device, < 0: no target; null: none has one
  LogitsRowStats* out = nullptr;  // [rows] device
};
void logits_reduce(const LogitsReduceArgs& a, cudaStream_t s, bool pdl = false);

// One row's sampler for sample_topk (layout of device::SampleRow): the host
// sampler's temperature / top-k / min-p / top-p and the uniform u it drew.
struct SampleRow {
  double u = 0;           // [0, 1)
  float temperature = 1;  // > 0
  float top_p = 1;        // (0, 1]
  float min_p = 0;        // [0, 1]
  int top_k = 0;          // 1..kSampleMaxTopK; 0: the row is not sampled (out -1)
};
inline constexpr int kSampleMaxTopK = 1024;

struct SampleArgs {
  const float* logits = nullptr;        // [rows][ld] FP32 device
  int64_t ld = 0;                       // 0: vocab
  int vocab = 0, rows = 0;              // drawable ids [0, vocab)
  const SampleRow* samplers = nullptr;  // [rows] device
  int* out = nullptr;                   // [rows] device: the token; -1 not sampled; -2 no drawable logit
};
// The next token of each row with runtime::Sampler's rule (sm90_sample_topk.cuh).
void sample_topk(const SampleArgs& a, cudaStream_t s, bool pdl = false);

}  // namespace futr::cuda
