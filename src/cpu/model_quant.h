// Whole-model quantization and the quantized reference model (CPU).
//
// quantize_model(): the seven projections of every layer into one format
//   - bf16: W rounded to BF16;
//   - fp8:  the (BF16) RMSNorm gain folded into q/k/v and gate/up, then E4M3
//           per output channel (quant/fp8_weights.h); with calibration tokens,
//           the largest activation amax seen per site becomes the site's
//           initial delayed-scaling amax (stored in .futr files);
//   - int4: "rtn", "clip" (RTN + clipping search on the weight MSE),
//           "clip-act" (the search's error weighted per input by E[x_k^2] from
//           one FP32 pass over the calibration tokens), "gptq", "gptq-clip"
//           (GPTQ whose group scales come from the search weighted by H_kk)
//           (quant/int4_quant.h, quant/gptq.h), optional act-order.
//
// GPTQ calibration runs the CPU forward layer by layer through the already
// quantized prefix (the paper's sequential scheme):
//   h_0 = embedding rows of the calibration tokens (windows of calib_ctx)
//   for l = 0 .. L-1:
//     for each of the layer's four inputs in order (attention input, shared
//     by q/k/v; attention output -> o; MLP input, shared by gate/up; SwiGLU
//     output -> down): run layer l on h_l with the projections of the
//     earlier inputs already quantized, accumulate that input's Hessian
//     H = X^T X / n, quantize its projections with GPTQ ("true sequential";
//     with true_sequential = false one FP32 pass collects all four);
//     pass 2: run layer l with its quantized weights: h_{l+1} = h_l + o + d.
// Each pass is the real cpu::Forward on a one-layer model whose "embedding
// table" is h_l and whose "tokens" are row indices (so attention, RoPE and
// the norms are the exact forward code); the Linear wrappers record inputs
// (pass 1) or the o / down outputs (pass 2), and h_{l+1} is rebuilt with the
// same FP32 additions the forward pass makes. Calibration runs in FP32 with
// the quantized prefix's dequantized weights (no activation rounding).
//
// QuantForward: a cpu::Forward running a weight format and a KV mode with the
// numerics contract of docs/QUANTIZATION.md (Linear classes of
// cpu/quant_linear.h, KV storages of cpu/kv_quant.h). In every quantized mode
// (bf16, fp8, int4) the token embedding, the LM head and the norm gains are
// BF16; the LM head is a Bf16Linear with FP32 logits.
//
// Tests: tests/cpu/model_quant_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/forward.h"
#include "cpu/kv_quant.h"
#include "model/model.h"
#include "quant/delayed_scaling.h"
#include "quant/gptq.h"
#include "quant/quantized_model.h"

namespace futr::cpu {

struct QuantizeOptions {
  WeightFormat format = WeightFormat::kInt4;
  std::string method = "rtn";  // int4: rtn | clip | clip-act | gptq | gptq-clip
  bool act_order = false;      // int4 gptq: process inputs by decreasing activity
  int group = 0;               // int4: 0 = 128 where K % 128 == 0, else 64
  quant::ClipSearch clip;      // grid of the clipping search (enabled by the method)
  double damp = 0.01;          // GPTQ damping
  bool true_sequential = true; // GPTQ: each input's Hessian with the earlier projections of the
                               // layer already quantized (q/k/v -> o -> gate/up -> down)
  int calib_ctx = 512;         // calibration window length (tokens)
};

// Progress: stage name, steps done, steps total.
using QuantProgress = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

// True when quantizing needs calibration tokens: INT4 clip-act, gptq and
// gptq-clip (input statistics), and FP8 (each activation site's initial amax).
bool needs_calibration(const QuantizeOptions& o);

// Quantizes model's projections. calib: token ids (cut into windows of
// calib_ctx) for GPTQ and the FP8 initial amax; may be empty for rtn/clip/bf16/fp8.
quant::QuantizedWeights quantize_model(const Model& model, const QuantizeOptions& o,
                                       std::span<const int32_t> calib,
                                       const QuantProgress& progress = {});

struct QuantRunOptions {
  WeightFormat weights = WeightFormat::kFp32;
  KvFormat kv = KvFormat::kFp32;
  int kv_block = 64;                 // Hadamard block (int4-rot)
  quant::DelayedScalingConfig fp8;   // delayed scaling of FP8 activations
  bool fp8_rms_in_cast = false;      // folded RMSNorm: 1/rms before the E4M3 cast (variant)
  int max_batch = 256;               // tokens per forward chunk
};

class QuantForward {
 public:
  // q: the quantized projections for fp8/int4 (ignored for fp32/bf16).
  QuantForward(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
               const QuantRunOptions& o, int ctx);
  Forward& forward() { return *fwd_; }
  const Forward& forward() const { return *fwd_; }
  std::string describe() const;           // weights, KV, scaling in one line
  // FP8: the delayed-scaling state (nullptr otherwise).
  const quant::ScaleBank* fp8_bank() const { return bank_.get(); }
  const QuantRunOptions& options() const { return opt_; }

 private:
  QuantRunOptions opt_;
  std::shared_ptr<const quant::QuantizedWeights> q_;
  std::vector<float> embd_;                  // [vocab, hidden] BF16-rounded embedding
  std::shared_ptr<quant::ScaleBank> bank_;   // FP8 activation sites
  std::unique_ptr<Forward> fwd_;
};

// The Linear factory of a quantized mode (exposed for tests): builds the
// projection `name` from q (fp8/int4) or from the FP32 weight (bf16).
LinearFactory quant_linear_factory(const Model& model, WeightFormat format,
                                   std::shared_ptr<const quant::QuantizedWeights> q,
                                   std::shared_ptr<quant::ScaleBank> bank, bool fp8_rms_in_cast = false);

// The FP8 activation site names of layer l: attn_in, o_in, ffn_in, down_in.
std::vector<std::string> fp8_site_names(int layer);

}  // namespace futr::cpu
