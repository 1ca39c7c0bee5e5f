// Names and lookups of quantized projections (see quantized_model.h).
#include "quant/quantized_model.h"

#include <fmt/format.h>

#include "core/error.h"

namespace futr::quant {

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
