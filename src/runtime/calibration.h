// The calibration tokens of the quantizers that need input statistics
// (INT4 clip-act, gptq, gptq-clip; FP8's initial amax): the LAST 10% of the
// calibration text's tokens (BOS first if the tokenizer adds one), at most
// `tokens` of them, so that they are disjoint from an evaluation of its first
// 90% (docs/ACCURACY.md). Used by make_engine() (quantizing on load) and by
// `futr quantize`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/config.h"

namespace futr::runtime {

// The default perplexity / calibration text: FUTR_DEFAULT_TEXT (the build
// setting: the repository's data/wikitext-2-raw/wiki.test.raw), else the copy
// `cmake --install` put beside this executable (<prefix>/share/futransformer/),
// else FUTR_DEFAULT_TEXT (whose absence the reader then reports).
std::string default_text_path();

// futr::Error naming the file when it cannot be read or its slice is shorter
// than one calibration window (c.ctx).
std::vector<int32_t> calibration_tokens(const Model& model, const CalibrationConfig& c);

// The first `n` tokens of the text's held-out tail, tokenizing only that part
// (the whole text takes the GPU engine's load most of a second): the text
// from the first line that starts at or after 90% of its bytes. About the
// slice above (it starts at a line instead of at a token count), for the
// device calibration of FP8 weights quantized on load; futr::Error as above.
std::vector<int32_t> calibration_tokens_tail(const Model& model, const CalibrationConfig& c, size_t n);

}  // namespace futr::runtime
