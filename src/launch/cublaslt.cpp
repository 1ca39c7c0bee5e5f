#include "launch/cublaslt.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <string>

namespace futr::cuda {

namespace {
const char* name(LtInput in) {
  return in == LtInput::kBF16 ? "BF16" : (in == LtInput::kE4M3 ? "E4M3" : "E4M3 (fast accumulation)");
}
bool is_fp8(LtInput in) { return in != LtInput::kBF16; }
// Largest power of two (<= 256) dividing the address: the alignment cuBLASLt may assume.
int alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (u % uintptr_t(a)) != 0) a /= 2;
  return a;
}
}  // namespace

CublasLt::CublasLt(size_t workspace_bytes) : ws_(workspace_bytes), scale_slots_(128) {
  FUTR_CUBLAS_CHECK(cublasLtCreate(&h_));
}

CublasLt::~CublasLt() {
  for (auto& [key, p] : plans_) {
    if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
    if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
    if (p.la) cublasLtMatrixLayoutDestroy(p.la);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  }
  if (h_) cublasLtDestroy(h_);
}

CublasLt::Plan& CublasLt::plan(LtInput in, LtOutput out, int M, int N, int K, int align) {
  const Key key{int(in), int(out), M, N, K, align};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  const cudaDataType_t t = in == LtInput::kBF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
  // Column-major view: D'[N,M] = op(W)[N,K] * X[K,M] with W = our B (stored [N,K]
  // row-major = [K,N] column-major, transposed: "T") and X = our A ([M,K]
  // row-major = [K,M] column-major: "N"). FP8 requires exactly this TN form.
  FUTR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
  FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof(tA)));
  FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof(tB)));
  if (is_fp8(in)) {  // 0 (the default): cuBLASLt promotes the FP8 sums; 1: the whole sum in the tensor cores
    const int8_t fast = in == LtInput::kE4M3FastAccum ? 1 : 0;
    FUTR_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  FUTR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la, t, K, N, K));
  FUTR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, t, K, M, K));
  FUTR_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p.lc, out == LtOutput::kF32 ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t pref = nullptr;
  FUTR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ws_.bytes();
  const uint32_t al = uint32_t(align);
  FUTR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    FUTR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al)));
  // The scale pointers are part of the problem cuBLASLt plans for: set them
  // (to a placeholder) before asking for algorithms, as every call will.
  if (is_fp8(in)) {
    const float* any = reinterpret_cast<const float*>(ws_.get());
    FUTR_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof(any)));
    FUTR_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof(any)));
  }
  cublasLtMatmulHeuristicResult_t heur[8] = {};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h_, p.op, p.la, p.lb, p.lc, p.lc, pref, 8, heur, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; i < found; ++i)
    if (heur[i].state == CUBLAS_STATUS_SUCCESS && heur[i].workspaceSize <= ws)
      p.algos.push_back(heur[i].algo);
  if (st != CUBLAS_STATUS_SUCCESS || p.algos.empty()) {
    cublasLtMatrixLayoutDestroy(p.lc);
    cublasLtMatrixLayoutDestroy(p.lb);
    cublasLtMatrixLayoutDestroy(p.la);
    cublasLtMatmulDescDestroy(p.op);
    fail("cuBLASLt has no algorithm for {} M={} N={} K={} (heuristic status {}, {} candidates)", name(in), M,
         N, K, int(st), found);
  }
  return plans_.emplace(key, std::move(p)).first->second;
}

void CublasLt::matmul(LtInput in, const void* a, const void* b, void* c, int M, int N, int K,
                      const float* a_scale, const float* b_scale, cudaStream_t s, LtOutput out) {
  const int align = std::min({alignment(a), alignment(b), alignment(c)});
  Plan& p = plan(in, out, M, N, K, align);
  if (is_fp8(in)) {
    auto aligned_scale = [&](const float* p, int slot) -> const float* {
      if (!p || (reinterpret_cast<uintptr_t>(p) & 15) == 0) return p;
      float* dst = scale_slots_.get() + 64 * slot;
      FUTR_CUDA_CHECK(cudaMemcpyAsync(dst, p, sizeof(float), cudaMemcpyDeviceToDevice, s));
      return dst;
    };
    a_scale = aligned_scale(a_scale, 0);
    b_scale = aligned_scale(b_scale, 1);
    // Our A (activations) is cuBLASLt's B and vice versa; nullptr means 1.
    FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                                     sizeof(b_scale)));
    FUTR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                                     sizeof(a_scale)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  std::string tried;
  for (size_t n = 0; n < p.algos.size(); ++n) {
    const size_t i = (p.good + n) % p.algos.size();
    const cublasStatus_t st = cublasLtMatmul(h_, p.op, &alpha, b, p.la, a, p.lb, &beta, c, p.lc, c, p.lc,
                                             &p.algos[i], ws_.get(), ws_.bytes(), s);
    if (st == CUBLAS_STATUS_SUCCESS) {
      p.good = i;
      return;
    }
    tried += (tried.empty() ? "" : ", ") + std::to_string(int(st));
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) break;  // a real error: do not mask it
  }
  fail(
      "cuBLASLt {} matmul M={} N={} K={} failed for every candidate algorithm (statuses {}; set "
      "CUBLASLT_LOG_LEVEL=2 for cuBLASLt's reason)",
      name(in), M, N, K, tried);
}

}  // namespace futr::cuda
