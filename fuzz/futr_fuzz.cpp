// libFuzzer target: the .futr reader (formats/futr_file.h) on arbitrary bytes.
//
// Parses the fixed header and the JSON header (nesting limit, blob table:
// ranges, alignment, overlaps, duplicates), builds the model with weights
// (config and tokenizer range checks, tokenizer validation, every dense
// tensor and the preferred projection set dequantized, FP8 folded gains
// divided out) and reads every stored projection set. Only futr::Error may
// come out. Seeds: fuzz/corpus/futr (micro models in each weight format,
// written by make_seeds.cpp). See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "formats/futr_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace futr;
  try {
    const FutrFile f(std::span<const uint8_t>(data, size), "fuzz.futr");
    for (WeightFormat w : f.formats()) {
      try {
        (void)f.read_weights(w);
      } catch (const Error&) {}
    }
    (void)f.to_model(true);
  } catch (const Error&) {}
  return 0;
}
