#include "cuda/cublaslt.h"

#include <cuda_fp8.h>

namespace futr::cuda {

CublasLt::CublasLt(size_t workspace_bytes) : ws_(workspace_bytes) {
  FUTR_CUBLAS_CHECK(cublasLtCreate(&h_));
}

CublasLt::~CublasLt() {
  if (h_) cublasLtDestroy(h_);
}

void CublasLt::matmul(LtInput in, const void* a, const void* b, void* c, int M, int N, int K,
                      const float* a_scale, const float* b_scale, cudaStream_t s) {
  const cudaDataType_t t = in == LtInput::kBF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  // Column-major view: D'[N,M] = op(W)[N,K] * X[K,M] with W = our B (stored [N,K]
  // row-major = [K,N] column-major, transposed) and X = our A ([M,K] row-major =
  // [K,M] column-major).
  FUTR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
  FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof(tA)));
  FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof(tB)));
  if (in == LtInput::kE4M3) {
    // Our A (activations) is cuBLASLt's B and vice versa.
    if (b_scale)
      FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                       &b_scale, sizeof(b_scale)));
    if (a_scale)
      FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                       &a_scale, sizeof(a_scale)));
  }
  FUTR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, t, K, N, K));
  FUTR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, t, K, M, K));
  FUTR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N));
  FUTR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = ws_.bytes();
  FUTR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h_, op, la, lb, lc, lc, pref, 1, &heur, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    const float alpha = 1.0f, beta = 0.0f;
    st = cublasLtMatmul(h_, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &heur.algo, ws_.get(),
                        ws, s);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  FUTR_CHECK(found > 0, "cuBLASLt has no algorithm for {} M={} N={} K={}",
             in == LtInput::kBF16 ? "BF16" : "E4M3", M, N, K);
  FUTR_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt {} matmul M={} N={} K={} failed with status {}",
             in == LtInput::kBF16 ? "BF16" : "E4M3", M, N, K, int(st));
}

}  // namespace futr::cuda
