// Shared by the server tests: the default model's tokenizer (SmolLM2; the
// tests skip with a reason when the model file is absent) and a word list
// for the fake engine.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "formats/loader.h"
#include "tokenizer/tokenizer.h"

namespace futr::test {

// The default model's tokenizer, loaded once; null when the model is absent.
inline const Tokenizer* default_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(FUTR_DEFAULT_MODEL)) return nullptr;
    return std::make_unique<Tokenizer>(load_tokenizer_spec(FUTR_DEFAULT_MODEL));
  }();
  return tok.get();
}

#define FUTR_NEED_TOKENIZER(tok)                                                        \
  const ::futr::Tokenizer* tok = ::futr::test::default_tokenizer();                     \
  if (!tok) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)"

// Single-token ASCII words of `tok` (" the", " quick", ...) for the fake engine.
inline std::vector<int32_t> word_tokens(const Tokenizer& tok) {
  std::vector<int32_t> w;
  for (const char* s : {" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog",
                        ".", ",", " and", " of", " cat", " in", " is"}) {
    const auto ids = tok.encode(s, false, false);
    if (ids.size() == 1) w.push_back(ids[0]);
  }
  return w;
}

}  // namespace futr::test
