// libFuzzer target: the safetensors reader (formats/safetensors.h) on
// arbitrary bytes: header parsing, range checks, and conversion of every
// tensor. Only futr::Error may come out. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace futr;
  try {
    const SafetensorsFile f(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    for (const SafetensorsTensor& t : f.tensors()) {
      try {
        (void)f.read_tensor(t);
      } catch (const Error&) {}
      (void)f.find(t.name);
    }
  } catch (const Error&) {}
  return 0;
}
