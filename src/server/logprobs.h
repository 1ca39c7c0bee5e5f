// Log-probabilities of `futr serve` (OpenAI's `logprobs`, `top_logprobs`,
// `echo`): the per-token values the scheduler computes from a logits row, and
// the JSON shapes of both routes.
//
// The values are those of the model's raw distribution, before any sampling
// transform (temperature, top-k, top-p, min-p, penalties), as OpenAI and vLLM
// report them:
//   lse        = max(z) + log(sum_i exp(z_i - max(z)))      (double, the whole row)
//   logprob(t) = -(lse - z_t)                               == -runtime::token_nll(z, t)
// computed in exactly token_nll's order, so a value from a kLogits row has the
// bits of the engine's RowOutput::kLogprob row on the same logits (the CPU
// engines compute kLogprob with token_nll; `futr perplexity` reads those).
// The top alternatives are the k largest logits among ids [0, limit) (ids
// without a token, a padded LM head's, are never listed), descending, ties
// by the lower id. A logprob of -inf is reported as -9999.0 (OpenAI's and
// vLLM's convention: JSON has no infinity).
//
// Token strings (chat `token`, completions `tokens` and the keys of
// `top_logprobs`): the token's bytes where they are valid UTF-8, each byte of
// an invalid or incomplete sequence written as the four characters \xNN
// (OpenAI's form for a token that holds part of a character); chat's `bytes`
// are the raw bytes. Control tokens are listed by their text ("<|im_end|>").
//
// Shapes:
//   chat:         {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}] (k)}]}
//   completions:  {tokens: [str], token_logprobs: [num|null], top_logprobs: [{str: num}|null],
//                  text_offset: [int]}; top_logprobs holds the k most likely
//                  and the chosen token (so up to k + 1 keys, as OpenAI's);
//                  an echoed prompt's first token has null / null (nothing
//                  predicts it). text_offset[i] is the number of Unicode code
//                  points of the returned text before token i (with echo the
//                  text starts with the prompt's); a token that starts inside a
//                  character gets that character's offset.
//
// Tests: tests/server/logprobs_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace futr::server {

inline constexpr int kMaxTopLogprobs = 20;  // top_logprobs (chat) and logprobs (completions) at most

struct TopLogprob {
  int32_t token = 0;
  double logprob = 0.0;
};

// One token of a choice with its log-probability.
struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0.0;         // log p(token | the tokens before it)
  bool has_logprob = true;      // false: an echoed prompt's first token (nothing predicts it)
  std::vector<TopLogprob> top;  // the k most likely, descending (k = what the request asked)
};

// The entry of `token` from its logits row z (the row whose next token it is):
// its logprob and the k most likely ids among [0, limit) (limit <= 0: the whole row).
TokenLogprob token_logprob(std::span<const float> z, int32_t token, int k, int32_t limit);

// lse of the whole row, in runtime::token_nll's order (see the file comment).
double log_sum_exp(std::span<const float> z);

// The token's text as logprobs report it (see the file comment).
std::string token_string(const Tokenizer& tok, int32_t id);

// Builds a choice's `logprobs` object, chunk by chunk: the streaming chunks
// and a whole answer call add() with the entries in order, so text offsets
// continue across chunks (and from an echoed prompt into the completion).
class LogprobsWriter {
 public:
  // chat: chat's shape, else completions'; top: the k alternatives asked for.
  LogprobsWriter(const Tokenizer& tok, bool chat, int top)
      : tok_(&tok), chat_(chat), top_(top), decoder_(tok) {}
  // The logprobs object of these entries (the next ones of the choice).
  nlohmann::json add(std::span<const TokenLogprob> entries);

 private:
  const Tokenizer* tok_;
  bool chat_;
  int top_;
  StreamDecoder decoder_;  // the returned text, for text_offset
  int64_t offset_ = 0;     // code points of the text so far
};

}  // namespace futr::server
