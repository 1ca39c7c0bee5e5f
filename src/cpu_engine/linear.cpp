// DenseLinear: y[m, N] = x[m, K] W[N, K]^T in FP32 through CBLAS (see linear.h).
#include "cpu_engine/linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "cpu_engine/threads.h"

namespace futr::cpu {

namespace {
void check_weight(const Tensor& w, const std::string& name) {
  FUTR_CHECK(w.rank() == 2, "linear layer '{}': weight must be 2-D [out, in], got {}", name, w.shape_str());
  FUTR_CHECK(w.dim(0) > 0 && w.dim(1) > 0, "linear layer '{}': empty weight {}", name, w.shape_str());
  FUTR_CHECK(int64_t(w.data.size()) == w.numel(),
             "linear layer '{}': weight {} holds {} values instead of {}", name, w.shape_str(), w.data.size(),
             w.numel());
}
}  // namespace

DenseLinear::DenseLinear(const float* w, int64_t out, int64_t in, Tensor owned)
    : owned_(std::move(owned)), w_(w), out_(out), in_(in) {
  if (!owned_.empty()) w_ = owned_.ptr();
}

std::unique_ptr<DenseLinear> DenseLinear::borrow(const Tensor& w, const std::string& name) {
  check_weight(w, name);
  return std::unique_ptr<DenseLinear>(new DenseLinear(w.ptr(), w.dim(0), w.dim(1), Tensor()));
}

std::unique_ptr<DenseLinear> DenseLinear::own(Tensor w, const std::string& name) {
  check_weight(w, name);
  const int64_t out = w.dim(0), in = w.dim(1);
  return std::unique_ptr<DenseLinear>(new DenseLinear(nullptr, out, in, std::move(w)));
}

std::string DenseLinear::describe() const { return fmt::format("fp32 [{}, {}]", out_, in_); }

void DenseLinear::forward(const float* x, int64_t m, float* y) {
  FUTR_ASSERT(m >= 1);
  gemm_xwt(x, m, w_, out_, in_, y);
}

namespace {
thread_local bool t_row_invariant = false;

// Row-invariant mode (RowInvariantScope): rows one by one through sgemv, over
// column chunks small enough to stay in cache while every row reads them.
void gemm_xwt_rows(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y) {
  constexpr int64_t kChunkBytes = 128 << 10;
  const int64_t chunk = std::max<int64_t>(16, kChunkBytes / (4 * k) / 16 * 16);
  const int64_t chunks = (n + chunk - 1) / chunk;
  constexpr int64_t kParallelMin = 1 << 18;
#pragma omp parallel for schedule(dynamic, 1) if (m * n * k >= kParallelMin && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t n0 = c * chunk, n1 = std::min(n, n0 + chunk);
    for (int64_t i = 0; i < m; ++i)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(n1 - n0), blasint(k), 1.0f, w + n0 * k, blasint(k),
                  x + i * k, 1, 0.0f, y + i * n + n0, 1);
  }
}
}  // namespace

RowInvariantScope::RowInvariantScope() : previous_(t_row_invariant) { t_row_invariant = true; }
RowInvariantScope::~RowInvariantScope() { t_row_invariant = previous_; }
bool row_invariant_gemms() { return t_row_invariant; }

void gemm_xwt(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y) {
  if (m > 1 && t_row_invariant) {
    ensure_single_threaded_blas();
    gemm_xwt_rows(x, m, w, n, k, y);
    return;
  }
  // NOTE: one thread pool (OpenMP) for everything: OpenBLAS runs single-threaded
  // inside each OpenMP thread (cpu_engine/threads.h says why). The output columns are
  // cut into about 4 slices per thread (multiples of 16 columns, at least 64)
  // handed out dynamically, so a thread that the OS deschedules on a shared
  // machine does not hold the others up.
  ensure_single_threaded_blas();
  // Below ~256K multiply-adds (~0.1 ms on one core) a parallel region costs
  // more than it saves, above all on a loaded machine.
  constexpr int64_t kParallelMin = 1 << 18;
  const bool parallel = m * n * k >= kParallelMin;
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  const int64_t slice = std::max<int64_t>(64, (n + 4 * threads - 1) / (4 * threads) + 15) / 16 * 16;
  const int64_t slices = (n + slice - 1) / slice;
#pragma omp parallel for schedule(dynamic, 1) if (parallel && slices > 1)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t n0 = s * slice, n1 = std::min(n, n0 + slice);
    if (m == 1) {
      // One row: y[n0:n1] = W[n0:n1, :] x, a matrix-vector product (memory bound).
      cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(n1 - n0), blasint(k), 1.0f, w + n0 * k, blasint(k), x,
                  1, 0.0f, y + n0, 1);
    } else {
      // y[:, n0:n1] = x[m, K] * W[n0:n1, K]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(m), blasint(n1 - n0), blasint(k), 1.0f, x,
                  blasint(k), w + n0 * k, blasint(k), 0.0f, y + n0, blasint(n));
    }
  }
}

}  // namespace futr::cpu
