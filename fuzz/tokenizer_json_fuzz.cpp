// libFuzzer target: the Hugging Face tokenizer.json reader
// (tokenizer/hf_json.h, tokenizer_spec_from_hf_texts) on arbitrary text, then
// the tokenizer built from what it accepted: encode (with and without special
// tokens) and decode of a fixed text that has every pre-tokenizer class in it
// (letters, digits, spaces, punctuation, a contraction, CJK, an emoji,
// invalid UTF-8). Only futr::Error may come out. Seeds: fuzz/corpus/tokenizer_json.
// See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace futr;
  static const std::string kText =
      "Hello, world! It's 2024: 12345 tokens\n\t  <|im_start|>user \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 "
      "\xff\xfe";
  try {
    HfTokenizerTexts t;
    t.dir = "fuzz";
    t.tokenizer.assign(reinterpret_cast<const char*>(data), size);
    const TokenizerSpec spec = tokenizer_spec_from_hf_texts(t, 1 << 20);
    const Tokenizer tok(spec);
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(kText, false, special);
      (void)tok.decode(ids);
    }
  } catch (const Error&) {}
  return 0;
}
