// The default model (SmolLM2-135M-Instruct, FUTR_DEFAULT_MODEL) as the GPU
// engine tests compare it with the CPU reference, each part built once per
// test process, on its first use (a test that runs only the decode path does
// not pay for the FP8 calibration pass, a CPU forward of 2048 tokens):
//   default_model()        the model (a missing file fails naming it)
//   default_model_int4()   its projections INT4 RTN (the decode path's weights)
//   default_model_fp8()    FP8 with the initial amax calibrated on 2048 tokens
//                          of the default text (the prefill path's weights, as
//                          `futr quantize` writes them); (false): uncalibrated
//   default_model_text()   the tokens of the test excerpt (FUTR_TEST_TEXT)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/loader.h"
#include "quantize/quantize.h"
#include "runtime/calibration.h"
#include "support/data_file.h"
#include "tokenizer/tokenizer.h"

namespace futr::test {

inline const Model& default_model() {
  static const Model m = (require_data_file(FUTR_DEFAULT_MODEL), load_model(FUTR_DEFAULT_MODEL));
  return m;
}

inline std::shared_ptr<const quant::QuantizedWeights> default_model_int4() {
  static const auto q = [] {
    cpu::QuantizeOptions qo;
    qo.format = WeightFormat::kInt4;
    qo.method = QuantMethod::kRtn;
    return std::make_shared<const quant::QuantizedWeights>(cpu::quantize_model(default_model(), qo, {}));
  }();
  return q;
}

inline std::shared_ptr<const quant::QuantizedWeights> default_model_fp8(bool calibrated = true) {
  auto make = [](bool calib) {
    cpu::QuantizeOptions qo;
    qo.format = WeightFormat::kFp8;
    std::vector<int32_t> tokens;
    if (calib) {
      runtime::CalibrationConfig cc;
      cc.tokens = 2048;
      tokens = runtime::calibration_tokens(default_model(), cc);
    }
    return std::make_shared<const quant::QuantizedWeights>(cpu::quantize_model(default_model(), qo, tokens));
  };
  if (calibrated) {
    static const auto q = make(true);
    return q;
  }
  static const auto bare = make(false);
  return bare;
}

inline const std::vector<int32_t>& default_model_text() {
  static const std::vector<int32_t> t = [] {
    const std::string text = read_data_file(FUTR_TEST_TEXT);
    const Tokenizer tok(default_model().tokenizer);
    return tok.encode(text, tok.add_bos(), false);
  }();
  return t;
}

}  // namespace futr::test
