// libFuzzer target: config.json parsing of the Hugging Face reader
// (formats/hf_checkpoint.h: parse_hf_config, then ModelConfig::validate) on
// arbitrary text. Only futr::Error may come out. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "formats/hf_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace futr;
  try {
    const ModelConfig c =
        parse_hf_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    c.validate("fuzz.json");
  } catch (const Error&) {}
  return 0;
}
