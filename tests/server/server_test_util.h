// Shared by the server tests: the default model's tokenizer (SmolLM2; the
// tests skip with a reason when the model file is absent) and a word list
// for the fake engine.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/loader.h"
#include "server/fake_engine.h"
#include "server/scheduler.h"
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

#define FUTR_NEED_TOKENIZER(tok)                                    \
  const ::futr::Tokenizer* tok = ::futr::test::default_tokenizer(); \
  if (!tok) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)"

// Single-token ASCII words of `tok` (" the", " quick", ...) for the fake engine.
inline std::vector<int32_t> word_tokens(const Tokenizer& tok) {
  std::vector<int32_t> w;
  for (const char* s : {" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".",
                        ",", " and", " of", " cat", " in", " is"}) {
    const auto ids = tok.encode(s, false, false);
    if (ids.size() == 1) w.push_back(ids[0]);
  }
  return w;
}

// The fake engine's options for `tok`: its vocabulary size and EOS, drawing
// from `words` (word_tokens(tok)).
inline FakeEngine::Options fake_engine_options(const Tokenizer& tok, const std::vector<int32_t>& words) {
  FakeEngine::Options o;
  o.vocab = tok.vocab_size();
  o.words = words;
  o.eos = tok.eos();
  return o;
}

// n tokens drawn from `words`.
inline std::vector<int32_t> random_words(std::mt19937& rng, const std::vector<int32_t>& words, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(words[rng() % words.size()]);
  return p;
}

// What a request streamed, collected until it ended.
struct Outcome {
  std::string text;
  server::Finish finish = server::Finish::kNone;
  int completion_tokens = 0;
  std::string error;
  std::vector<server::TokenLogprob> logprobs, prompt_logprobs;
  bool prompt_logprobs_first = true;  // no text came before the prompt's logprobs
};

// Waits for `r` to end (a test failure when nothing comes for `patience`).
inline Outcome collect(server::Request& r,
                       std::chrono::milliseconds patience = std::chrono::milliseconds(20000)) {
  Outcome o;
  server::Request::Update u;
  while (!u.done) {
    server::Request::Update next;
    if (!r.wait(next, patience)) {
      ADD_FAILURE() << "no progress in " << patience.count() << " ms";
      return o;
    }
    if (!next.prompt_logprobs.empty()) {
      EXPECT_TRUE(o.prompt_logprobs.empty()) << "prompt logprobs twice";
      o.prompt_logprobs = next.prompt_logprobs;
    }
    if (!next.text.empty() && o.prompt_logprobs.empty()) o.prompt_logprobs_first = false;
    o.text += next.text;
    o.logprobs.insert(o.logprobs.end(), next.logprobs.begin(), next.logprobs.end());
    u = next;
  }
  o.finish = u.finish;
  o.completion_tokens = u.completion_tokens;
  o.error = u.error;
  return o;
}

// What the fake engine generates for `p` alone (an idle server): tokens
// until EOS or max_tokens.
inline std::vector<int32_t> reference_tokens(const FakeEngine& e, const server::GenerationParams& p,
                                             int32_t eos) {
  std::vector<int32_t> history = p.prompt, out;
  while (int(out.size()) < p.max_tokens) {
    const int32_t t = e.draw_for(p.sampling.seed, history);
    if (t == eos) break;
    out.push_back(t);
    history.push_back(t);
  }
  return out;
}

// `o` is what the fake engine generates for `p` alone: the same text and
// token count, finished by EOS before max_tokens, else by the length.
inline void expect_reference_outcome(const Outcome& o, const FakeEngine& e, const server::GenerationParams& p,
                                     const Tokenizer& tok, const std::string& what) {
  const std::vector<int32_t> ref = reference_tokens(e, p, tok.eos());
  EXPECT_EQ(o.text, tok.decode(ref)) << what;
  EXPECT_EQ(o.completion_tokens, int(ref.size())) << what;
  EXPECT_EQ(o.finish, int(ref.size()) < p.max_tokens ? server::Finish::kStop : server::Finish::kLength)
      << what;
}

}  // namespace futr::test
