// The quantized projections of a model, in their logical forms: what the
// quantizers produce (cpu/model_quant.h), what a .futr file stores (packed
// into the kernel layouts by formats/futr_file.h) and what the quantized CPU
// reference runs (cpu/quant_linear.h).
//
// Only the seven projections of every layer are quantized ("blk.<l>.attn_q",
// ... "blk.<l>.ffn_down", the names cpu/weights.h gives the LinearFactory).
// The token embedding, the LM head and the norm gains stay BF16 in every
// quantized configuration (docs/QUANTIZATION.md "What is quantized").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/formats.h"
#include "quant/fp8_weights.h"
#include "quant/int4_pack.h"

namespace futr::quant {

struct QuantizedTensor {
  std::string name;            // projection name, e.g. "blk.3.ffn_down"
  WeightFormat format = WeightFormat::kBf16;
  int n = 0, k = 0;            // [out, in]
  std::string method;          // how it was made: "bf16", "fp8-channel", "rtn", "rtn+clip",
                               // "gptq", "gptq+clip" (+ ",act-order")
  Int4Weights int4;            // format kInt4
  Fp8Weights fp8;              // format kFp8 (fp8.folded_gain: an RMSNorm gain folded in)
  std::vector<uint16_t> bf16;  // format kBf16: [n, k] BF16 bits
};

// One format's projections of a whole model.
struct QuantizedWeights {
  WeightFormat format = WeightFormat::kBf16;
  std::string method;                              // summary, e.g. "gptq+clip g128/64"
  std::map<std::string, QuantizedTensor> tensors;  // projection name -> tensor
  // FP8 only: calibrated initial amax per activation site ("blk.<l>.attn_in",
  // "blk.<l>.o_in", "blk.<l>.ffn_in", "blk.<l>.down_in"); empty: the default.
  std::map<std::string, float> fp8_initial_amax;

  const QuantizedTensor& at(const std::string& name) const;  // futr::Error if absent
};

// The projection names of layer l, in forward order.
std::vector<std::string> layer_projection_names(int layer);

}  // namespace futr::quant
