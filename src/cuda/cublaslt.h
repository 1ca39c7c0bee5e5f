// cuBLASLt baselines: the peer every FuTransformer GEMM is measured against.
//
//   C[M,N] (BF16, row-major) = a_scale * b_scale * A[M,K] x B[N,K]^T
//
// A is row-major (activations), B is K-major (weights, [N,K] row-major), the
// same operand layout as our own kernels. BF16 x BF16 and E4M3 x E4M3 (per-tensor
// device scales) with FP32 accumulation. cuBLASLt sees this as the column-major
// "TN" product C^T = B A^T, which is also the layout its FP8 kernels require.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/buffer.h"

namespace futr::cuda {

enum class LtInput { kBF16, kE4M3 };

class CublasLt {
 public:
  explicit CublasLt(size_t workspace_bytes = size_t(64) << 20);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // a: [M,K], b: [N,K], c: [M,N] bf16. For kE4M3, a_scale/b_scale are device
  // pointers to one float each (nullptr means 1); ignored for kBF16.
  // Throws futr::Error if cuBLASLt has no algorithm for the problem.
  void matmul(LtInput in, const void* a, const void* b, void* c, int M, int N, int K,
              const float* a_scale, const float* b_scale, cudaStream_t s);

 private:
  cublasLtHandle_t h_ = nullptr;
  DeviceBuffer<uint8_t> ws_;
};

}  // namespace futr::cuda
