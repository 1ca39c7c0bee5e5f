// Linear layers of the CPU reference backend: y = x W^T.
//
//   x: [m, in]   activations, FP32, row-major, contiguous
//   W: [out, in] weights (the Hugging Face convention, docs/ARCHITECTURE.md)
//   y: [m, out]  FP32, row-major, contiguous
//   y[i, o] = sum_k x[i, k] * W[o, k]
//
// The forward pass (cpu_engine/forward.h) sees every projection (q, k, v, o, gate,
// up, down, LM head) only through the `Linear` interface, so a weight format
// is a new subclass, not a new forward pass. This file defines the FP32 one,
// `DenseLinear`, which runs cblas_sgemm (or cblas_sgemv for a single row) on
// slices of the output columns spread over the OpenMP threads (gemm_xwt).
//
// Seam for the quantized reference: an INT4-g128 or FP8-per-channel
// Linear implements forward() by computing exactly what the GPU kernel
// computes (same rounding of the activations, same group scales applied after
// each group's FP32 accumulation, ...), and a LinearFactory (cpu_engine/weights.h)
// decides per projection which class to build. forward() is non-const so a
// layer may keep state between calls (e.g. FP8 delayed activation scaling).
//
// Tests: tests/cpu_engine/ops_test.cpp (DenseLinear against a naive triple loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace futr::cpu {

class Linear {
 public:
  virtual ~Linear() = default;
  virtual int64_t in_features() const = 0;   // K
  virtual int64_t out_features() const = 0;  // N
  // One line for logs and `futr info`: format and shape, e.g. "fp32 [1536, 576]".
  virtual std::string describe() const = 0;
  // y[m, out] = x[m, in] W^T. x and y must not overlap. m >= 1.
  virtual void forward(const float* x, int64_t m, float* y) = 0;
  // Folded RMSNorm (the FP8 prefill path, cpu_engine/quant_linear.h): a
  // projection that follows an RMSNorm may carry the gain in its weights
  // (W' = W diag(g)) and apply the row factor 1/sqrt(mean(x^2) + eps) after its
  // GEMM. When this returns true the forward pass gives forward() the
  // un-normalized rows x instead of RMSNorm(x) * g.
  virtual bool folds_rmsnorm() const { return false; }
};

// y[m, n] = x[m, k] W[n, k]^T in FP32 (row-major, contiguous), on all OpenMP
// threads: single-threaded OpenBLAS (sgemm, or sgemv when m == 1) on slices
// of the n output columns, handed out dynamically (about 4 per thread).
void gemm_xwt(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y);

// Row-invariant GEMMs on the calling thread while a scope is alive: gemm_xwt
// gives every row of an m-row call the bits that row gets alone (m == 1),
// by one sgemv per row over column chunks of about 128 KiB of weights (read
// from memory once, from cache for the other rows). OpenBLAS's sgemv computes
// each output in an order that does not depend on the columns around it in
// the call (the chunking; checked bit for bit by
// tests/runtime/speculative_test.cpp). The CPU engines run decode steps of
// several rows of one sequence (speculative decoding's drafts) in it, so
// each row's logits are ordinary decoding's.
class RowInvariantScope {
 public:
  RowInvariantScope();
  ~RowInvariantScope();
  RowInvariantScope(const RowInvariantScope&) = delete;
  RowInvariantScope& operator=(const RowInvariantScope&) = delete;

 private:
  bool previous_;
};
bool row_invariant_gemms();  // a RowInvariantScope is alive on this thread

// FP32 weights, W [out, in] row-major. Either borrows the model's tensor (no
// copy; the tensor must outlive the layer) or owns a tensor moved into it.
class DenseLinear final : public Linear {
 public:
  // Borrow: `w` must stay alive and unchanged while this layer is used.
  static std::unique_ptr<DenseLinear> borrow(const Tensor& w, const std::string& name);
  // Own: takes the tensor (e.g. a weight transformed before use).
  static std::unique_ptr<DenseLinear> own(Tensor w, const std::string& name);

  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  std::string describe() const override;
  void forward(const float* x, int64_t m, float* y) override;

  const float* weights() const { return w_; }  // [out, in]

 private:
  DenseLinear(const float* w, int64_t out, int64_t in, Tensor owned);
  Tensor owned_;              // holds the data when owning; empty when borrowing
  const float* w_ = nullptr;  // [out_, in_] row-major
  int64_t out_ = 0;           // N
  int64_t in_ = 0;            // K
};

}  // namespace futr::cpu
