// OpenAI request validation and response bodies (see api.h).
#include "server/api.h"

#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>

#include "core/json.h"
#include "core/text.h"
#include "server/prompt.h"

namespace futr::server {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", message, param);
}

// A client's string in a message: short and escaped, never the whole value.
std::string echo(std::string_view s) { return printable(s, 64); }

// {"type": "text", ...}: the one content-part / response-format type served.
// (json::value("type", "") would throw on a non-string type: a 500, not a 400.)
bool is_text_type(const json& v) {
  return v.is_object() && v.contains("type") && v["type"].is_string() &&
         v["type"].get<std::string>() == "text";
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_float: return "number";
    default: return "integer";
  }
}

int64_t get_int(const json& v, const std::string& name) {
  if (!v.is_number_integer()) bad(name, fmt::format("'{}' must be an integer (got {})", name, type_name(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    bad(name, fmt::format("'{}' is too large", name));
  return v.get<int64_t>();
}

double get_number(const json& v, const std::string& name) {
  if (!v.is_number()) bad(name, fmt::format("'{}' must be a number (got {})", name, type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x)) bad(name, fmt::format("'{}' must be finite", name));
  return x;
}

bool get_bool(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, fmt::format("'{}' must be a boolean (got {})", name, type_name(v)));
  return v.get<bool>();
}

const std::string& get_string(const json& v, const std::string& name) {
  if (!v.is_string()) bad(name, fmt::format("'{}' must be a string (got {})", name, type_name(v)));
  return v.get_ref<const std::string&>();
}

// Parameters OpenAI knows that futr accepts only at their neutral value.
void check_neutral(const std::string& k, const json& v) {
  auto unsupported = [&] {
    bad(k, fmt::format("'{}' = {} is not supported by this server", k, json_snippet(v, 64)));
  };
  if (k == "best_of") {
    if (get_int(v, k) != 1) unsupported();
  } else if (k == "logit_bias") {
    if (!v.is_object() || !v.empty()) unsupported();
  } else if (k == "suffix") {
    unsupported();  // null is handled as absent
  } else if (k == "response_format") {
    if (!is_text_type(v) || v.size() != 1) unsupported();
  } else if (k == "tools") {
    if (!v.is_array() || !v.empty()) unsupported();
  } else if (k == "tool_choice") {
    if (!(v.is_string() && v.get<std::string>() == "none")) unsupported();
  }
  // user, store, metadata, parallel_tool_calls: accepted and ignored.
}

std::vector<int32_t> token_list(const json& v, const std::string& name, int vocab) {
  std::vector<int32_t> ids;
  for (const auto& t : v) {
    const int64_t id = get_int(t, name + "[]");
    if (id < 0 || id >= vocab)
      bad(name, fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
    ids.push_back(int32_t(id));
  }
  return ids;
}

std::vector<int32_t> parse_prompt(const json& v, const ApiContext& ctx) {
  const int vocab = ctx.tok->vocab_size();
  if (v.is_string()) return encode_completion_prompt(*ctx.tok, v.get_ref<const std::string&>());
  if (v.is_array() && !v.empty()) {
    if (v[0].is_number_integer()) return token_list(v, "prompt", vocab);
    if (v.size() == 1 && v[0].is_string())
      return encode_completion_prompt(*ctx.tok, v[0].get_ref<const std::string&>());
    if (v.size() == 1 && v[0].is_array()) return token_list(v[0], "prompt", vocab);
    if (v.size() > 1 && (v[0].is_string() || v[0].is_array()))
      bad("prompt",
          "only one prompt per request is supported (got a batch of " + std::to_string(v.size()) + ")");
  }
  bad("prompt", "'prompt' must be a string, an array of token ids, or an array of one of them");
}

std::vector<ChatMessage> parse_messages(const json& v) {
  if (!v.is_array()) bad("messages", fmt::format("'messages' must be an array (got {})", type_name(v)));
  if (v.empty()) bad("messages", "'messages' must not be empty");
  if (v.size() > kMaxMessages)
    bad("messages",
        fmt::format("at most {} messages per request are supported (got {})", kMaxMessages, v.size()));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = fmt::format("messages[{}]", i);
    const json& m = v[i];
    if (!m.is_object()) bad(p, fmt::format("'{}' must be an object", p));
    ChatMessage msg;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& k = it.key();
      if (k == "role") {
        msg.role = get_string(*it, p + ".role");
      } else if (k == "content") {
        const json& c = *it;
        if (c.is_string()) {
          msg.content = c.get<std::string>();
        } else if (c.is_array()) {
          for (const auto& part : c) {
            if (!is_text_type(part) || !part.contains("text") || !part["text"].is_string())
              bad(p + ".content",
                  "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
            msg.content += part["text"].get<std::string>();
          }
        } else if (!c.is_null()) {
          bad(p + ".content", fmt::format("'{}.content' must be a string or an array of text parts", p));
        }
      } else if (k == "name") {
        get_string(*it, p + ".name");  // accepted, not rendered (the templates ignore it)
      } else {
        bad(p + "." + echo(k), fmt::format("Unrecognized argument in {}: '{}'", p, echo(k)));
      }
    }
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      bad(p + ".role", fmt::format("'{}.role' must be system, developer, user or assistant (got '{}')", p,
                                   echo(msg.role)));
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<std::string> parse_stop(const json& v) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 4) bad("stop", "at most 4 stop strings are supported");
    for (const auto& s : v) out.push_back(get_string(s, "stop[]"));
  } else {
    bad("stop", fmt::format("'stop' must be a string or an array of strings (got {})", type_name(v)));
  }
  for (const auto& s : out) {
    if (s.empty()) bad("stop", "stop strings must not be empty");
    std::string clean;
    if (utf8_sanitize(s, true, clean) != s.size() || clean != s)
      bad("stop", "stop strings must be valid UTF-8");
  }
  return out;
}

}  // namespace

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

json ApiError::body() const { return error_body(what(), type_, param_, code_); }

ApiRequest parse_request(Endpoint endpoint, std::string_view body, const ApiContext& ctx) {
  const bool chat = endpoint == Endpoint::kChat;
  // The one JSON entry point (core/json.h): nesting cap, duplicate keys
  // refused, a short excerpt in the message; the size is --max-body's.
  json j;
  try {
    j = parse_json_document(body, "the request body");
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error",
                   fmt::format("We could not parse the JSON body of your request. ({})", e.what()));
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");

  static const std::set<std::string> common = {"model",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "n",
                                               "stream",
                                               "stream_options",
                                               "stop",
                                               "seed",
                                               "user",
                                               "frequency_penalty",
                                               "presence_penalty",
                                               "min_p",
                                               "repetition_penalty",
                                               "logprobs",
                                               "logit_bias",
                                               "speculative",
                                               "ignore_eos"};
  static const std::set<std::string> completions_only = {"prompt", "echo", "best_of", "suffix"};
  static const std::set<std::string> chat_only = {
      "messages",    "max_completion_tokens", "top_logprobs", "response_format", "tools",
      "tool_choice", "parallel_tool_calls",   "store",        "metadata"};
  static const std::set<std::string> neutral = {"best_of",         "logit_bias", "suffix",
                                                "response_format", "tools",      "tool_choice"};

  ApiRequest r;
  r.endpoint = endpoint;
  SamplerConfig& s = r.gen.sampling;
  s.temperature = 1.0f;  // OpenAI's defaults
  s.top_p = 1.0f;
  s.top_k = 0;
  s.penalty_last_n = 0;  // the penalties see the whole sequence (OpenAI, vLLM)
  std::optional<int64_t> max_tokens, seed;
  std::optional<int64_t> top_logprobs;
  std::optional<int> speculative;  // the request's "speculative" (absent: the server's default)  // chat
  std::string max_tokens_name = "max_tokens";
  bool chat_logprobs = false;
  bool have_model = false, have_input = false;
  const json* input = nullptr;
  const json* stream_options = nullptr;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = *it;
    if (!common.count(k) && !(chat ? chat_only : completions_only).count(k))
      bad(echo(k), fmt::format("Unrecognized request argument supplied: {}", echo(k)));
    if (v.is_null()) continue;
    if (neutral.count(k)) {
      check_neutral(k, v);
    } else if (k == "model") {
      if (get_string(v, k) != ctx.model)
        throw ApiError(404, "invalid_request_error",
                       fmt::format("The model '{}' does not exist (this server serves '{}')",
                                   echo(v.get<std::string>()), ctx.model),
                       "model", "model_not_found");
      have_model = true;
    } else if (k == "prompt" || k == "messages") {
      input = &v;
      have_input = true;
    } else if (k == "max_tokens" || k == "max_completion_tokens") {
      max_tokens = get_int(v, k);
      max_tokens_name = k;
      if (*max_tokens < 0) bad(k, fmt::format("'{}' must be >= 1 (got {})", k, *max_tokens));
      if (*max_tokens > ctx.max_request_positions)
        bad(k, fmt::format("'{}' = {} is more than the context of {} tokens", k, *max_tokens,
                           ctx.max_request_positions));
    } else if (k == "temperature") {
      const double t = get_number(v, k);
      if (t < 0 || t > 2) bad(k, fmt::format("'temperature' must be in [0, 2] (got {})", t));
      s.temperature = float(t);
    } else if (k == "top_p") {
      const double p = get_number(v, k);
      if (!(float(p) > 0 && p <= 1)) bad(k, fmt::format("'top_p' must be in (0, 1] (got {})", p));
      s.top_p = float(p);
    } else if (k == "top_k") {
      const int64_t t = get_int(v, k);
      if (t < -1 || t > ctx.tok->vocab_size())
        bad(k, fmt::format("'top_k' must be -1, 0 (off) or in [1, {}] (got {})", ctx.tok->vocab_size(), t));
      s.top_k = t <= 0 ? 0 : int(t);
    } else if (k == "min_p") {
      const double p = get_number(v, k);
      if (p < 0 || p > 1) bad(k, fmt::format("'min_p' must be in [0, 1] (0 = off; got {})", p));
      s.min_p = float(p);
    } else if (k == "repetition_penalty") {
      const double r = get_number(v, k);
      if (!(float(r) > 0 && r <= 10))
        bad(k, fmt::format("'repetition_penalty' must be in (0, 10] (1 = off; got {})", r));
      s.repetition_penalty = float(r);
    } else if (k == "presence_penalty" || k == "frequency_penalty") {
      const double x = get_number(v, k);
      if (x < -2 || x > 2) bad(k, fmt::format("'{}' must be in [-2, 2] (0 = off; got {})", k, x));
      (k == "presence_penalty" ? s.presence_penalty : s.frequency_penalty) = float(x);
    } else if (k == "n") {
      const int64_t n = get_int(v, k);
      if (n < 1 || n > kMaxChoices) bad(k, fmt::format("'n' must be in [1, {}] (got {})", kMaxChoices, n));
      r.n = int(n);
    } else if (k == "logprobs") {
      if (chat) {
        // A bool; 0 reads as false (what this server accepted before).
        if (v.is_number_integer() && v.get<int64_t>() == 0) continue;
        chat_logprobs = get_bool(v, k);
      } else if (!(v.is_boolean() && !v.get<bool>())) {  // false: none
        if (!v.is_number_integer())
          bad(k, fmt::format("'logprobs' must be an integer in [0, {}] (got {})", kMaxTopLogprobs,
                             type_name(v)));
        const int64_t lp = get_int(v, k);
        if (lp < 0 || lp > kMaxTopLogprobs)
          bad(k, fmt::format("'logprobs' must be in [0, {}] (got {})", kMaxTopLogprobs, lp));
        r.logprobs = int(lp);
      }
    } else if (k == "top_logprobs") {
      top_logprobs = get_int(v, k);
      if (*top_logprobs < 0 || *top_logprobs > kMaxTopLogprobs)
        bad(k, fmt::format("'top_logprobs' must be in [0, {}] (got {})", kMaxTopLogprobs, *top_logprobs));
    } else if (k == "echo") {
      r.echo = get_bool(v, k);
    } else if (k == "speculative") {
      // futr's own field: prompt-lookup drafts verified in one step (the same
      // tokens as without): true (the server's draft length, 8 where it has
      // none), false, or the most draft tokens per step.
      if (v.is_boolean()) {
        speculative = v.get<bool>() ? (ctx.speculative > 0 ? ctx.speculative : 8) : 0;
      } else {
        const int64_t d = get_int(v, k);
        if (d < 0 || d > kMaxSpeculative)
          bad(k, fmt::format("'speculative' must be a boolean or a draft length in [0, {}] (got {})",
                             kMaxSpeculative, d));
        speculative = int(d);
      }
    } else if (k == "ignore_eos") {
      r.gen.ignore_eos = get_bool(v, k);
    } else if (k == "stream") {
      r.stream = get_bool(v, k);
    } else if (k == "stream_options") {
      if (!v.is_object()) bad(k, "'stream_options' must be an object");
      stream_options = &v;
    } else if (k == "stop") {
      r.gen.stop = parse_stop(v);
    } else if (k == "seed") {
      seed = get_int(v, k);
    } else if (k == "user") {
      get_string(v, k);
    }
  }
  if (!have_model) bad("model", "you must provide a model parameter");
  if (chat) {
    if (top_logprobs && *top_logprobs > 0 && !chat_logprobs)
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (chat_logprobs) r.logprobs = top_logprobs ? int(*top_logprobs) : 0;
  }
  // max_tokens 0: only to echo (and score) the prompt, as OpenAI's completions allow.
  if (max_tokens && *max_tokens == 0 && !r.echo)
    bad(max_tokens_name, fmt::format("'{}' must be >= 1 (0 only with 'echo': true; got 0)", max_tokens_name));
  const bool prompt_only = max_tokens && *max_tokens == 0;
  if (!have_input)
    bad(chat ? "messages" : "prompt",
        fmt::format("'{}' is a required property", chat ? "messages" : "prompt"));
  if (stream_options) {
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    for (auto it = stream_options->begin(); it != stream_options->end(); ++it) {
      if (it.key() != "include_usage")
        bad("stream_options." + echo(it.key()), "Unrecognized argument in stream_options: " + echo(it.key()));
      if (!it->is_null()) r.include_usage = get_bool(*it, "stream_options.include_usage");
    }
  }

  // The prompt as token ids.
  if (chat) {
    if (!ctx.chat)
      bad("messages", "this model has no chat template the server understands; use /v1/completions");
    const auto messages = parse_messages(*input);
    r.gen.prompt = encode_chat_prompt(*ctx.tok, *ctx.chat, messages);
  } else {
    r.gen.prompt = parse_prompt(*input, ctx);
  }
  if (r.gen.prompt.empty()) bad(chat ? "messages" : "prompt", "the prompt is empty");
  const int64_t n = int64_t(r.gen.prompt.size());
  if (n > ctx.max_request_positions || (n == ctx.max_request_positions && !prompt_only))
    bad(chat ? "messages" : "prompt",
        fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                    "tokens (at least one must be left to generate).",
                    ctx.max_request_positions, n));
  const int64_t mt = max_tokens ? *max_tokens : chat ? ctx.max_request_positions - n : 16;
  if (n + mt > ctx.max_request_positions)
    bad(max_tokens ? "max_tokens" : "prompt",
        fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                    "tokens ({} in the prompt, {} for the completion).",
                    ctx.max_request_positions, n + mt, n, mt));
  r.gen.max_tokens = int(mt);
  r.gen.logprobs = r.logprobs;
  // Without the field, the server's default (futr serve --speculative); auto
  // drafts only greedy requests: sampled ones accept drafts less often and
  // verify them on the host from the rows' logits (docs/PERF.md).
  r.gen.speculative = speculative                                        ? *speculative
                      : ctx.speculative_greedy_only && s.temperature > 0 ? 0
                                                                         : ctx.speculative;
  if (speculative && *speculative > 0 && !ctx.speculative_unsupported.empty())
    bad("speculative", fmt::format("speculative decoding is not available with this engine: {}",
                                   ctx.speculative_unsupported));
  // echo with logprobs scores the prompt; echo with max_tokens 0 and no
  // logprobs too (a prompt-only request runs as a scoring one; nothing of it
  // is returned but the text).
  if (r.echo) r.gen.prompt_logprobs = r.logprobs >= 0 ? r.logprobs : prompt_only ? 0 : -1;
  if (r.echo) {
    StreamDecoder d(*ctx.tok);
    for (int32_t t : r.gen.prompt) r.echo_text += d.push(t);
    r.echo_text += d.flush();
  }
  s.seed = seed ? uint64_t(*seed) : uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  // The ranges above are the sampler's (runtime/sampler.h; temperature is
  // OpenAI's narrower [0, 2]); the engine would refuse anything else.
  try {
    runtime::validate_sampler_config(s, "");
  } catch (const Error& e) {
    bad("", e.what());
  }
  return r;
}

std::string finish_reason(Finish f) { return f == Finish::kLength ? "length" : "stop"; }

json usage_json(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::vector<GenerationParams> choice_params(const ApiRequest& r) {
  std::vector<GenerationParams> out(size_t(r.n), r.gen);
  for (int i = 0; i < r.n; ++i) out[size_t(i)].sampling.seed = r.gen.sampling.seed + uint64_t(i);
  return out;
}

json full_response(Endpoint e, const ResponseMeta& m, const std::string& text, Finish f, int prompt_tokens,
                   int completion_tokens) {
  ApiRequest r;
  r.endpoint = e;
  r.gen.prompt.resize(size_t(prompt_tokens));
  ChoiceOutput c;
  c.text = text;
  c.finish = f;
  c.completion_tokens = completion_tokens;
  return full_response(r, nullptr, m, {&c, 1});
}

json full_response(const ApiRequest& r, const Tokenizer* tok, const ResponseMeta& m,
                   std::span<const ChoiceOutput> choices) {
  const Endpoint e = r.endpoint;
  json out = json::array();
  int completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    completion_tokens += c.completion_tokens;
    json logprobs = nullptr;
    if (r.logprobs >= 0) {
      FUTR_CHECK(tok, "logprobs need the tokenizer");
      LogprobsWriter w(*tok, e == Endpoint::kChat, r.logprobs);
      if (e == Endpoint::kChat) {
        logprobs = w.add(c.logprobs);
      } else {
        std::vector<TokenLogprob> all = r.echo ? c.prompt_logprobs : std::vector<TokenLogprob>{};
        all.insert(all.end(), c.logprobs.begin(), c.logprobs.end());
        logprobs = w.add(all);
      }
    }
    json choice = {
        {"index", int(i)}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish_reason(c.finish)}};
    if (e == Endpoint::kChat) choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else choice["text"] = r.echo ? r.echo_text + c.text : c.text;
    out.push_back(std::move(choice));
  }
  return {{"id", m.id},
          {"object", e == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", std::move(out)},
          {"usage", usage_json(int(r.gen.prompt.size()), completion_tokens)}};
}

json stream_chunk(Endpoint e, const ResponseMeta& m, const std::string& text, Finish f, bool role_chunk,
                  int index, json logprobs) {
  json choice = {{"index", index},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", f == Finish::kNone ? json(nullptr) : json(finish_reason(f))}};
  if (e == Endpoint::kChat) {
    json delta = json::object();
    if (role_chunk) delta["role"] = "assistant";
    if (role_chunk || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", m.id},
          {"object", e == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})}};
}

json usage_chunk(Endpoint e, const ResponseMeta& m, int prompt_tokens, int completion_tokens) {
  return {{"id", m.id},
          {"object", e == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array()},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json models_response(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data",
           json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "futr"}}})}};
}

}  // namespace futr::server
