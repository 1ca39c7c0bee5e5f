// The OpenAI API subset of `futr serve`: request validation and response
// bodies, as pure functions (no HTTP, no engine), so every rule is unit-tested.
//
// Requests (POST /v1/completions, POST /v1/chat/completions):
//   model        string, required, the served model's id (else 404 model_not_found)
//   prompt       completions: string | [string] | [int] | [[int]] (one prompt)
//   messages     chat: [{role: system|developer|user|assistant, content: string |
//                [{type: "text", text}], name?}], not empty, at most 8192
//   max_tokens   integer >= 1 (0 with echo; chat also max_completion_tokens); default 16
//                (completions) or the rest of the context (chat)
//   temperature  number in [0, 2], default 1 (0 = greedy)
//   top_p        number in (0, 1], default 1
//   top_k        integer, -1 or 0 = off (default), else >= 1 (an extension, as in vLLM)
//   min_p        number in [0, 1], default 0 = off (an extension, as in vLLM / llama-server)
//   repetition_penalty  number in (0, 10], default 1 = off (extension, as in vLLM):
//                over the prompt and the completion
//   presence_penalty, frequency_penalty  numbers in [-2, 2] (OpenAI's range),
//                default 0: over the tokens generated so far
//   (the ranges of runtime/sampler.h, checked again with it; the penalties
//   see the whole sequence: penalty_last_n = 0)
//   seed         integer; default: a random seed
//   stop         string | [string] (at most 4, not empty)
//   n            integer in [1, kMaxChoices]: n choices, choice i sampled with
//                seed + i (each its own sequence)
//   stream  bool;  stream_options {include_usage: bool}
//   logprobs     completions: integer in [0, kMaxTopLogprobs] (false: none),
//                each token's log-probability and the k most likely tokens;
//                chat: bool (0: false)
//   top_logprobs chat: integer in [0, kMaxTopLogprobs], > 0 only with logprobs
//   echo         completions: bool, the prompt's text before the completion
//                (with logprobs: the prompt tokens' too, the first null);
//                max_tokens may then be 0 (score the prompt only)
//   (log-probabilities of the model's raw distribution: server/logprobs.h)
//   speculative  bool, or the most draft tokens per step in [0, kMaxSpeculative]
//                (futr's own; true: the server's draft length, 8 where it has
//                none): prompt-lookup drafts verified in one step, the same
//                tokens; absent: the server's default (ApiContext::speculative)
//   ignore_eos   bool: end-of-generation tokens do not end the request (it runs
//                to max_tokens or a stop string; vLLM's extra parameter)
//   accepted at their neutral value only: best_of (1), logit_bias ({}),
//   suffix (null), response_format ({"type": "text"}), tools ([]),
//   tool_choice ("none"); user, store, metadata, parallel_tool_calls:
//   accepted and ignored;
//   anything else: 400 "Unrecognized request argument supplied: X".
// A null value counts as absent (as in OpenAI's API). The body is parsed by
// core/json.h's parse_json_document (nesting at most 64 levels, no duplicate
// keys); messages echo a client's value only clipped and escaped.
//
// Errors use OpenAI's body: {"error": {"message", "type", "param", "code"}}.
//
// Tests: tests/server/api_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/logprobs.h"
#include "server/scheduler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace futr::server {

enum class Endpoint { kCompletions, kChat };

inline constexpr size_t kMaxMessages = 8192;  // per chat request
inline constexpr int kMaxChoices = 16;        // n at most

// A 4xx/5xx answer: HTTP status and the OpenAI error fields.
class ApiError : public Error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {},
           std::string code = {})
      : Error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  nlohmann::json body() const;

 private:
  int status_;
  std::string type_, param_, code_;
};

// {"error": {"message", "type", "param", "code"}} (param/code null when empty).
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = {},
                          const std::string& code = {});

struct ApiContext {
  const Tokenizer* tok = nullptr;
  const ChatTemplate* chat = nullptr;  // null: the model has no usable chat template
  std::string model;                   // the served model id
  int64_t max_request_positions = 0;   // prompt + max_tokens at most
  int speculative = 0;                 // draft tokens per step of a request without "speculative" (0: off)
  // That default only for greedy requests (temperature 0): futr serve's --speculative auto.
  bool speculative_greedy_only = false;
  // Non-empty: the engine cannot run drafts (why); a request asking for them is refused.
  std::string speculative_unsupported;
};

// The most draft tokens per step a request may ask for ("speculative": k).
inline constexpr int kMaxSpeculative = 64;

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  GenerationParams gen;        // prompt ids, max_tokens, sampling, stop, logprobs (choice 0)
  int n = 1;                   // choices
  int logprobs = -1;           // -1: no logprobs in the answer; else k alternatives per token
  bool echo = false;           // completions: the prompt's text (and logprobs) first
  std::string echo_text;       // echo: the prompt's text, as the server decodes it
};

// Parses and validates a body; ApiError (400, 404) naming the parameter.
ApiRequest parse_request(Endpoint endpoint, std::string_view body, const ApiContext& ctx);

// The n choices' parameters: gen with the seed of choice i = gen's seed + i
// (mod 2^64).
std::vector<GenerationParams> choice_params(const ApiRequest& r);

// One choice of an answer as the HTTP layer collected it.
struct ChoiceOutput {
  std::string text;  // the completion (without the echoed prompt)
  Finish finish = Finish::kNone;
  int completion_tokens = 0;
  std::vector<TokenLogprob> prompt_logprobs;  // echo with logprobs
  std::vector<TokenLogprob> logprobs;         // the completion's tokens
};

// What the response bodies need besides the text.
struct ResponseMeta {
  std::string id;       // "cmpl-..." | "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

std::string finish_reason(Finish f);  // "stop" | "length" (others: "stop")
nlohmann::json usage_json(int prompt_tokens, int completion_tokens);

// A whole (non-streaming) response of one choice without logprobs.
nlohmann::json full_response(Endpoint e, const ResponseMeta& m, const std::string& text, Finish f,
                             int prompt_tokens, int completion_tokens);
// A whole response: choices[i] from choices[i] (echo text and logprobs as `r`
// asks); usage counts the prompt once and the completions' tokens summed (as
// OpenAI and vLLM report n > 1). `tok` writes the logprobs (may be null without).
nlohmann::json full_response(const ApiRequest& r, const Tokenizer* tok, const ResponseMeta& m,
                             std::span<const ChoiceOutput> choices);
// One streaming chunk of choice `index`: text delta, finish (kNone: still
// running), its tokens' logprobs object (null: none). Chat's first chunk of a
// choice carries {"role": "assistant"} (role_chunk).
nlohmann::json stream_chunk(Endpoint e, const ResponseMeta& m, const std::string& text, Finish f,
                            bool role_chunk = false, int index = 0, nlohmann::json logprobs = nullptr);
// The final chunk of stream_options.include_usage: empty choices, usage.
nlohmann::json usage_chunk(Endpoint e, const ResponseMeta& m, int prompt_tokens, int completion_tokens);
// GET /v1/models.
nlohmann::json models_response(const std::string& model, int64_t created);

}  // namespace futr::server
