// Names and lookups of quantized projections (see quantized_model.h).
#include "quant/quantized_model.h"

#include <fmt/format.h>

#include "core/error.h"

namespace futr::quant {

std::string to_string(WeightFormat f) {
  switch (f) {
    case WeightFormat::kFp32: return "fp32";
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kFp8: return "fp8";
    case WeightFormat::kInt4: return "int4";
  }
  return "?";
}

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "fp32") return WeightFormat::kFp32;
  if (s == "bf16") return WeightFormat::kBf16;
  if (s == "fp8") return WeightFormat::kFp8;
  if (s == "int4") return WeightFormat::kInt4;
  fail("unknown weight format '{}' (choose fp32, bf16, fp8, int4)", s);
}

const QuantizedTensor& QuantizedWeights::at(const std::string& name) const {
  auto it = tensors.find(name);
  FUTR_CHECK(it != tensors.end(), "quantized weights ({}): no tensor '{}'", to_string(format), name);
  return it->second;
}

std::vector<std::string> layer_projection_names(int layer) {
  std::vector<std::string> names;
  for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
    names.push_back(fmt::format("blk.{}.{}", layer, p));
  return names;
}

}  // namespace futr::quant
