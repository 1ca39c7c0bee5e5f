// The quantized reference's Linear layers: exactly the arithmetic the GPU
// kernels perform, on the CPU (docs/QUANTIZATION.md "Numerics contract").
//
//   Bf16Linear  (BF16 baseline; also the LM head of every quantized mode)
//     y[m, n] = out( sum_k bf16(x[m, k]) * Wb[n, k] )       Wb = bf16(W)
//   Int4Linear  (decode path, W4A16 kernels)
//     y[m, n] = bf16( sum_g s[n, g] * sum_{k in g} bf16(x[m, k]) * q[n, k] )
//   Fp8Linear   (prefill path, FP8 GEMM + epilogues)
//     xb  = bf16(x)                       x: the un-normalized rows when the
//                                         RMSNorm is folded (folds_rmsnorm())
//     a   = e4m3_satfinite(xb * (1/s))    s: delayed per-tensor scale of the
//                                         activation site (quant/delayed_scaling.h)
//     acc = sum_k a[m, k] * w8[n, k]       exact products, FP32 sums
//     y   = acc * (s * b_s[n])             ColScale
//     y  *= 1/sqrt(sumsq(xb[m]) / K + eps) RowRmsFactor (folded layers only)
//   Variant rms_in_cast (folded layers; docs/QUANTIZATION.md, "normalize in
//   the cast"): the row factor is applied before the E4M3 cast instead,
//     a = e4m3_satfinite(bf16(xb * r) * (1/s)),  y = acc * (s * b_s[n])
//   out() is a BF16 rounding where the GPU stores BF16 (round_output), and
//   none where the value stays FP32 in the fused epilogue (FP8 q/k/v before
//   RoPE, gate/up before SwiGLU, o/down before the residual add; LM-head logits).
//
// Every product above is exact in FP32 (bf16 x bf16: 16 bits; bf16 x
// (int4 * fp16): 8 + 15 bits; e4m3 x e4m3: 8 bits), so the only freedom is the
// order of the FP32 sums. The layers therefore run one FP32 sgemm on
// dequantized weights (Int4: W~ = q * s, exact; Fp8: the decoded E4M3 values)
// instead of per-group partial sums; tests/cpu_engine/quant_linear_test.cpp shows the
// difference to the literal per-group formula is at FP32 rounding level
// (relative 1e-6), far below the BF16 output rounding (4e-3).
//
// FP8 activation sites. The GPU runs q/k/v as one QKV GEMM and gate/up as one
// GEMM, so they share one A operand and one scale. Here each is a Linear; the
// first of a site (q, gate) is its owner: it quantizes x, steps the delayed
// scale, and caches the quantized rows; the followers (k, v, up) must be
// called next on the same x and reuse them (futr::Error otherwise).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cpu_engine/linear.h"
#include "quant/delayed_scaling.h"
#include "quant/fp8_weights.h"
#include "quant/int4_pack.h"

namespace futr::cpu {

// x rounded to BF16 into out (n values).
void round_bf16_into(const float* x, int64_t n, float* out);

class Bf16Linear final : public Linear {
 public:
  // w: [n, k] FP32, rounded to BF16 here. round_output: BF16 store of y.
  Bf16Linear(const float* w, int64_t n, int64_t k, bool round_output, std::string name);
  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  std::string describe() const override;
  void forward(const float* x, int64_t m, float* y) override;

 private:
  std::vector<float> w_;   // [n, k] BF16 values as FP32
  std::vector<float> xb_;  // [m, k] scratch: bf16(x)
  int64_t n_, k_;
  bool round_output_;
  std::string name_;
};

class Int4Linear final : public Linear {
 public:
  explicit Int4Linear(quant::Int4Weights w, std::string name);
  int64_t in_features() const override { return w_.k; }
  int64_t out_features() const override { return w_.n; }
  std::string describe() const override;
  void forward(const float* x, int64_t m, float* y) override;

  // The literal per-group formula of the kernel (FP32 partial sum per group,
  // times the group scale, summed over groups in FP32), unrounded, for tests.
  void forward_grouped(const float* x, int64_t m, float* y) const;
  const quant::Int4Weights& weights() const { return w_; }

 private:
  quant::Int4Weights w_;    // logical (q, FP16 scale)
  std::vector<float> deq_;  // [n, k] q * s (exact)
  std::vector<float> xb_;   // scratch
  std::string name_;
};

// One FP8 activation site (a GEMM's A operand) shared by the Linears reading it.
struct Fp8Site {
  std::shared_ptr<quant::ScaleBank> bank;  // delayed-scaling state of all sites and groups
  int id = 0;                              // site id in the bank
  // Cache of the owner's last quantization (read by the followers).
  uint64_t generation = 0;        // owner calls so far
  const float* x = nullptr;       // input it quantized
  int64_t m = 0;                  // rows
  float scale = 1.0f;             // s used
  std::vector<float> a;           // [m, K] decoded E4M3 values (not times s)
  std::vector<float> row_factor;  // [m] 1/rms (folded sites), else empty
};

class Fp8Linear final : public Linear {
 public:
  // folded: the weights carry an RMSNorm gain and the layer reads the
  // un-normalized rows (eps: the model's rms_eps). owner: this layer quantizes
  // the site's input (q, gate, o, down); followers reuse it (k, v, up).
  // rms_in_cast: apply 1/rms before the E4M3 cast instead of after the GEMM.
  // round_input: x rounded to BF16 before the cast (the BF16 activation the GPU
  // holds); false where the GPU casts an FP32 value (the SwiGLU epilogue's).
  Fp8Linear(quant::Fp8Weights w, std::shared_ptr<Fp8Site> site, bool owner, float eps, std::string name,
            bool rms_in_cast = false, bool round_input = true);
  int64_t in_features() const override { return w_.k; }
  int64_t out_features() const override { return w_.n; }
  std::string describe() const override;
  void forward(const float* x, int64_t m, float* y) override;
  bool folds_rmsnorm() const override { return w_.folded_gain; }

 private:
  void quantize_input(const float* x, int64_t m);  // owner: fills site_
  quant::Fp8Weights w_;
  std::vector<float> w8_;  // [n, k] decoded E4M3 weight values (not times the scale)
  std::shared_ptr<Fp8Site> site_;
  bool owner_;
  float eps_;
  bool rms_in_cast_;       // folded layers: r applied before the cast (variant)
  bool round_input_;       // bf16(x) before the cast (the constructor's round_input)
  uint64_t seen_ = 0;      // follower: the site generation consumed last
  std::vector<float> xb_;  // scratch
  std::string name_;
};

}  // namespace futr::cpu
