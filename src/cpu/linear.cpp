// DenseLinear: y[m, N] = x[m, K] W[N, K]^T in FP32 through CBLAS (see linear.h).
#include "cpu/linear.h"

#include <cblas.h>

#include <fmt/format.h>

#include "core/error.h"

namespace futr::cpu {

namespace {
void check_weight(const Tensor& w, const std::string& name) {
  FUTR_CHECK(w.rank() == 2, "linear layer '{}': weight must be 2-D [out, in], got {}", name,
             w.shape_str());
  FUTR_CHECK(w.dim(0) > 0 && w.dim(1) > 0, "linear layer '{}': empty weight {}", name,
             w.shape_str());
  FUTR_CHECK(int64_t(w.data.size()) == w.numel(),
             "linear layer '{}': weight {} holds {} values instead of {}", name, w.shape_str(),
             w.data.size(), w.numel());
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
  if (m == 1) {
    // One row: y[N] = W[N, K] x[K], a matrix-vector product (memory bound).
    cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(out_), blasint(in_), 1.0f, w_, blasint(in_),
                x, 1, 0.0f, y, 1);
    return;
  }
  // y[m, N] = x[m, K] * W[N, K]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(m), blasint(out_), blasint(in_),
              1.0f, x, blasint(in_), w_, blasint(in_), 0.0f, y, blasint(out_));
}

}  // namespace futr::cpu
