// The quantized projections of a model, in their logical forms: what the
// quantizers produce (quantize/quantize.h), what a .futr file stores (packed into
// the kernel layouts by formats/futr_file.h) and what the quantized CPU
// reference runs (cpu_engine/quant_linear.h, cpu_engine/quant_forward.h).
//
// Only the seven projections of every layer are quantized, keyed by ProjId
// (model/projection.h: layer + Projection); the "blk.<l>.attn_q" names are
// the .futr file's (converted in formats/futr_file.cpp). The token
// embedding, the LM head and the norm gains stay BF16 in every quantized
// configuration (docs/QUANTIZATION.md "What is quantized").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "model/projection.h"
#include "quant/fp8_weights.h"
#include "quant/int4_pack.h"

namespace futr::quant {

struct QuantizedTensor {
  ProjId id;  // which projection
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
  std::string method;                         // summary, e.g. "gptq+clip g128/64"
  std::map<ProjId, QuantizedTensor> tensors;  // projection -> tensor
  // FP8 only: calibrated initial amax per activation site (4 per layer,
  // model/projection.h InputSite); empty: the default.
  std::map<SiteId, float> fp8_initial_amax;

  const QuantizedTensor& at(ProjId id) const;  // futr::Error naming it if absent
};

}  // namespace futr::quant
