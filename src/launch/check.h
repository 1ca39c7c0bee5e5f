// Error checking for every CUDA runtime, driver and cuBLASLt call and launch.
// A failure throws futr::Error naming the call, the file:line and CUDA's text.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace futr::cuda {

[[noreturn]] inline void fail_cuda(cudaError_t e, const char* what, const char* file, int line) {
  fail("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(e), cudaGetErrorString(e), what, file, line);
}
[[noreturn]] inline void fail_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  fail("cuBLAS error {} in {} at {}:{}", int(s), what, file, line);
}

}  // namespace futr::cuda

#define FUTR_CUDA_CHECK(call)                                                                \
  do {                                                                                       \
    cudaError_t futr_e_ = (call);                                                            \
    if (futr_e_ != cudaSuccess) ::futr::cuda::fail_cuda(futr_e_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: catches bad launch configurations at once.
#define FUTR_CUDA_CHECK_LAUNCH() FUTR_CUDA_CHECK(cudaGetLastError())

#define FUTR_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                   \
    cublasStatus_t futr_s_ = (call);                                                                     \
    if (futr_s_ != CUBLAS_STATUS_SUCCESS) ::futr::cuda::fail_cublas(futr_s_, #call, __FILE__, __LINE__); \
  } while (0)
