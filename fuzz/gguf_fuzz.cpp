// libFuzzer target: the GGUF reader (formats/gguf.h) on arbitrary bytes.
//
// Parses the image, reads every metadata value in every typed way, builds the
// tokenizer spec, and loads the llama model with weights. Only futr::Error may
// come out; a crash, a sanitizer report, a hang or an allocation beyond
// libFuzzer's -rss_limit_mb is a bug. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace futr;
  try {
    const GgufFile f(std::span<const uint8_t>(data, size), "fuzz.gguf");
    for (const GgufKV& kv : f.metadata()) {
      const GgufValue& v = kv.value;
      (void)v.summary();
      auto attempt = [](auto&& fn) {
        try {
          fn();
        } catch (const Error&) {}
      };
      attempt([&] { (void)v.as_int("k"); });
      attempt([&] { (void)v.as_float("k"); });
      attempt([&] { (void)v.as_bool("k"); });
      attempt([&] { (void)v.as_string("k"); });
      attempt([&] { (void)v.int_array("k"); });
      attempt([&] { (void)v.float_array("k"); });
      attempt([&] { (void)v.string_array("k"); });
      attempt([&] {
        for (const GgufValue& item : v.array_items("k")) (void)item.summary();
      });
    }
    for (const GgufTensorInfo& t : f.tensors()) {
      try {
        (void)f.read_tensor(t);
      } catch (const Error&) {}
    }
    try {
      (void)gguf_tokenizer_spec(f);
    } catch (const Error&) {}
    (void)load_gguf_model(f, true);
  } catch (const Error&) {}
  return 0;
}
