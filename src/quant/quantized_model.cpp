// Lookups of quantized projections (see quantized_model.h).
#include "quant/quantized_model.h"

#include "core/error.h"

namespace futr::quant {

const QuantizedTensor& QuantizedWeights::at(ProjId id) const {
  auto it = tensors.find(id);
  FUTR_CHECK(it != tensors.end(), "quantized weights ({}): no tensor '{}'", to_string(format),
             projection_name(id));
  return it->second;
}

}  // namespace futr::quant
