// cuBLASLt baselines: the peer every FuTransformer GEMM is measured against.
//
//   C[M,N] (BF16, row-major) = a_scale * b_scale * A[M,K] x B[N,K]^T
//
// A is row-major (activations), B is K-major (weights, [N,K] row-major), the
// same operand layout as our own kernels. BF16 x BF16 and E4M3 x E4M3 (per-tensor
// device scales) with FP32 accumulation. cuBLASLt sees this as the column-major
// "TN" product C^T = B A^T, which is also the layout its FP8 kernels require.
//
// Plans (descriptors + the heuristic's candidate algorithms) are cached per
// (input type, M, N, K, operand alignment): repeated calls cost no heuristic
// query, so timing a small decode GEMM measures the GPU, not the host. A call
// tries the candidates in order until cuBLASLt accepts one (an algorithm the
// heuristic returns can still answer CUBLAS_STATUS_NOT_SUPPORTED, e.g. for
// operand alignment) and remembers the one that worked. Graph-capturable once
// the plan exists (the workspace is ours).
//
// NOTE: cuBLASLt's FP8 kernels answered CUBLAS_STATUS_NOT_SUPPORTED on the H200
// for every candidate algorithm when a scale pointer was only 4-byte aligned
// (both failing calls passed `scales + 1`). Scale pointers that are not 16-byte
// aligned are therefore first copied (4 bytes, on the stream, graph-capturable)
// into 256-byte-aligned slots of our own.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "launch/buffer.h"

namespace futr::cuda {

// E4M3 x E4M3 in cuBLASLt's default mode (its FP8 sums promoted to FP32) or
// with CUBLASLT_MATMUL_DESC_FAST_ACCUM (the whole K sum in the tensor cores).
enum class LtInput { kBF16, kE4M3, kE4M3FastAccum };
enum class LtOutput { kBF16, kF32 };  // C's type (FP32: the LM head's logits)

class CublasLt {
 public:
  explicit CublasLt(size_t workspace_bytes = size_t(64) << 20);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // a: [M,K], b: [N,K], c: [M,N] (BF16, or FP32 with LtOutput::kF32). For
  // kE4M3, a_scale/b_scale are device pointers to one float each (nullptr
  // means 1); ignored for kBF16. Throws futr::Error if cuBLASLt has no
  // algorithm for the problem.
  void matmul(LtInput in, const void* a, const void* b, void* c, int M, int N, int K, const float* a_scale,
              const float* b_scale, cudaStream_t s, LtOutput out = LtOutput::kBF16);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    std::vector<cublasLtMatmulAlgo_t> algos;  // heuristic order
    size_t good = 0;                          // index of the last algorithm that ran
  };
  using Key = std::tuple<int, int, int, int, int, int>;  // input, output, M, N, K, alignment bytes
  Plan& plan(LtInput in, LtOutput out, int M, int N, int K, int align);

  cublasLtHandle_t h_ = nullptr;
  DeviceBuffer<uint8_t> ws_;
  DeviceBuffer<float> scale_slots_;  // [128]: A scale at [0], B scale at [64] (256-byte aligned)
  std::map<Key, Plan> plans_;
};

}  // namespace futr::cuda
