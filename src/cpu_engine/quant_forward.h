// The quantized reference model (CPU): a cpu::Forward running a weight format
// and a KV format with the numerics contract of docs/QUANTIZATION.md (Linear
// classes of cpu_engine/quant_linear.h, KV storages of cpu_engine/kv_quant.h). In every
// quantized mode (bf16, fp8, int4) the token embedding, the LM head and the
// norm gains are BF16; the LM head is a Bf16Linear with FP32 logits.
//
// FP8: one delayed-scaling site per layer input (model/projection.h
// InputSite; bank id kInputSites * layer + site), its initial amax from the
// weights' calibration (QuantizedWeights::fp8_initial_amax) when present.
//
// The weights come from quantize/quantize.h (quantizing on load) or a .futr file;
// cpu_engine/engine.h runs this model behind runtime::Engine.
//
// Tests: tests/quantize/model_quant_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "cpu_engine/forward.h"
#include "cpu_engine/kv_quant.h"
#include "model/model.h"
#include "quant/delayed_scaling.h"
#include "quant/quantized_model.h"

namespace futr::cpu {

struct QuantRunOptions {
  WeightFormat weights = WeightFormat::kFp32;
  KvFormat kv = KvFormat::kFp32;
  int kv_block = 64;                // Hadamard block (int4-rot)
  quant::DelayedScalingConfig fp8;  // delayed scaling of FP8 activations
  bool fp8_rms_in_cast = false;     // folded RMSNorm: 1/rms before the E4M3 cast (variant)
  // The GPU prefill path's roundings: BF16 residual and q/k/v (Forward::set_bf16_activations),
  // the down projection's input (the SwiGLU output) cast to E4M3 from FP32, not from BF16.
  bool fp8_gpu_numerics = false;
  int max_batch = 256;  // tokens per forward chunk
};

class QuantForward {
 public:
  // q: the quantized projections for fp8/int4 (ignored for fp32/bf16).
  // kv: the storage of the forward pass's own cache (a paged view,
  // cpu_engine/paged_kv.h); null: a contiguous one of ctx positions in o.kv.
  QuantForward(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q, const QuantRunOptions& o,
               int ctx, std::unique_ptr<KvStorage> kv = nullptr);
  Forward& forward() { return *fwd_; }
  const Forward& forward() const { return *fwd_; }
  std::string describe() const;  // weights, KV, scaling in one line
  // FP8: the delayed-scaling state (nullptr otherwise).
  const quant::ScaleBank* fp8_bank() const { return bank_.get(); }
  const QuantRunOptions& options() const { return opt_; }

 private:
  QuantRunOptions opt_;
  std::shared_ptr<const quant::QuantizedWeights> q_;
  std::vector<float> embd_;                 // [vocab, hidden] BF16-rounded embedding
  std::shared_ptr<quant::ScaleBank> bank_;  // FP8 activation sites
  std::unique_ptr<Forward> fwd_;
};

// The Linear factory of a quantized mode (exposed for tests): builds each
// projection from q (fp8/int4) or from the FP32 weight (bf16).
LinearFactory quant_linear_factory(const Model& model, WeightFormat format,
                                   std::shared_ptr<const quant::QuantizedWeights> q,
                                   std::shared_ptr<quant::ScaleBank> bank, bool fp8_rms_in_cast = false,
                                   bool fp8_gpu_numerics = false);

// A copy of v rounded to BF16 (the norm gains of every quantized mode).
std::vector<float> bf16_copy(const std::vector<float>& v);

}  // namespace futr::cpu
