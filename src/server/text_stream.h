// The text a generation produces, token by token: detokenized through
// futr::StreamDecoder (never splits a UTF-8 sequence) and cut at the first
// stop string, which is matched on the decoded text (OpenAI semantics: the
// stop string itself is not returned).
//
//   push(token) -> the text that is safe to send now. Text that could still
//                  become the start of a stop string is held back (at most the
//                  longest stop string minus one byte) until the next tokens
//                  show whether it is one;
//   stopped()   -> a stop string was found: nothing more is returned;
//   finish()    -> the held text at the end of the generation (length / EOS).
//
// Held-back text always ends on a UTF-8 boundary: a stop string is valid
// UTF-8, so the suffix of valid text that equals one of its prefixes starts
// at a character boundary.
//
// Tests: tests/server/text_stream_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace futr::server {

// Stop-string matching over a stream of valid UTF-8 text pieces.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text`; returns what can be sent now (up to a stop string, if one
  // completed: then stopped() is true and later pushes return "").
  std::string push(std::string_view text);
  // What is held back (no stop string completed); resets the hold.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings
  std::string held_;                // tail that is a proper prefix of some stop string
  bool stopped_ = false;
};

// Tokens -> text with stop strings (the per-request text state of the scheduler).
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stops) : decoder_(tok), stop_(std::move(stops)) {}
  std::string push(int32_t token) { return stop_.push(decoder_.push(token)); }
  std::string finish() {
    std::string s = stop_.push(decoder_.flush());
    return stop_.stopped() ? s : s + stop_.finish();
  }
  bool stopped() const { return stop_.stopped(); }

 private:
  StreamDecoder decoder_;
  StopMatcher stop_;
};

}  // namespace futr::server
