// Whole-model quantization: the calibration and quantization pipeline (CPU).
// The quantized model it produces runs in cpu_engine/quant_forward.h.
//
// quantize_model(): the seven projections of every layer into one format
//   - bf16: W rounded to BF16;
//   - fp8:  the (BF16) RMSNorm gain folded into q/k/v and gate/up, then E4M3
//           per output channel (quant/fp8_weights.h); with calibration tokens,
//           the largest activation amax seen per site becomes the site's
//           initial delayed-scaling amax (stored in .futr files);
//   - int4: QuantMethod (core/number_formats.h): rtn, clip (RTN + clipping search
//           on the weight MSE), clip-act (the search's error weighted per
//           input by E[x_k^2] from one FP32 pass over the calibration
//           tokens), gptq, gptq-clip (GPTQ whose group scales come from the
//           search weighted by H_kk) (quant/int4_quant.h, quant/gptq.h),
//           optional act-order; each tensor's metadata label is
//           quant_method_label().
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
// Projections are named by ProjId (model/projection.h), never by strings.
//
// Tests: tests/quantize/model_quant_test.cpp.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "core/number_formats.h"
#include "model/model.h"
#include "quant/gptq.h"
#include "quant/quantized_model.h"

namespace futr::cpu {

struct QuantizeOptions {
  WeightFormat format = WeightFormat::kInt4;
  QuantMethod method = QuantMethod::kRtn;  // int4 quantizer (core/number_formats.h)
  bool act_order = false;                  // int4 gptq: process inputs by decreasing activity
  int group = 0;                           // int4: 0 = 128 where K % 128 == 0, else 64
  quant::ClipSearch clip;                  // grid of the clipping search (enabled by the method)
  double damp = 0.01;                      // GPTQ damping
  bool true_sequential = true;             // GPTQ: each input's Hessian with the earlier projections of the
                                           // layer already quantized (q/k/v -> o -> gate/up -> down)
  int calib_ctx = 512;                     // calibration window length (tokens)
};

// Progress: stage name, steps done, steps total.
using QuantProgress = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

// True when quantizing needs calibration tokens: INT4 clip-act, gptq and
// gptq-clip (input statistics), and FP8 (each activation site's initial amax).
bool needs_calibration(const QuantizeOptions& o);

// Quantizes model's projections. calib: token ids (cut into windows of
// calib_ctx) for GPTQ and the FP8 initial amax; may be empty for rtn/clip/bf16/fp8.
quant::QuantizedWeights quantize_model(const Model& model, const QuantizeOptions& o,
                                       std::span<const int32_t> calib, const QuantProgress& progress = {});

}  // namespace futr::cpu
