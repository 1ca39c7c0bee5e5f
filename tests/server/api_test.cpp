// The OpenAI request rules and response bodies (src/server/api.h), on
// SmolLM2's tokenizer: every kind of bad request gets its status and names
// its parameter; good ones give the prompt ids, limits and sampling asked for.
#include "server/api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/prompt.h"
#include "server/server_test_util.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = test::default_tokenizer();
    if (!tok_) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)";
    chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_tokenizer(*tok_));
    ctx_.tok = tok_;
    ctx_.chat = chat_.get();
    ctx_.model = "m";
    ctx_.max_request_positions = 64;
  }
  // The status and param of the ApiError `body` gets (0 if none).
  std::pair<int, std::string> error_of(Endpoint e, const std::string& body) {
    try {
      parse_request(e, body, ctx_);
    } catch (const ApiError& err) {
      const json b = err.body();
      EXPECT_TRUE(b["error"]["message"].is_string());
      EXPECT_TRUE(b["error"]["type"].is_string());
      return {err.status(), b["error"]["param"].is_string() ? b["error"]["param"].get<std::string>() : ""};
    }
    return {0, ""};
  }
  const Tokenizer* tok_ = nullptr;
  std::unique_ptr<ChatTemplate> chat_;
  ApiContext ctx_;
};

TEST_F(ApiTest, BadRequestsGet4xxNamingTheParameter) {
  const std::string long_prompt(400, 'x');  // ~ 100+ tokens > 64
  struct Case {
    Endpoint e;
    std::string body;
    int status;
    std::string param;
  };
  const Endpoint C = Endpoint::kCompletions, H = Endpoint::kChat;
  const std::vector<Case> cases = {
      {C, "{not json", 400, ""},
      {C, "[1, 2]", 400, ""},
      {C, R"({"prompt": "hi"})", 400, "model"},
      {C, R"({"model": "other", "prompt": "hi"})", 404, "model"},
      {C, R"({"model": 3, "prompt": "hi"})", 400, "model"},
      {C, R"({"model": "m"})", 400, "prompt"},
      {C, R"({"model": "m", "prompt": "hi", "ignore_eos": 1})", 400, "ignore_eos"},
      {C, R"({"model": "m", "prompt": 5})", 400, "prompt"},
      {C, R"({"model": "m", "prompt": ["a", "b"]})", 400, "prompt"},
      {C, R"({"model": "m", "prompt": [1, 99999999]})", 400, "prompt"},
      {C, R"({"model": "m", "prompt": ""})", 400, "prompt"},
      {C, R"({"model": "m", "prompt": "hi", "bogus": 1})", 400, "bogus"},
      {C, R"({"model": "m", "prompt": "hi", "messages": []})", 400, "messages"},
      {C, R"({"model": "m", "prompt": "hi", "max_tokens": -1})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": "hi", "max_tokens": 0})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": "hi", "max_tokens": 1e9})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": "hi", "max_tokens": 100000000000})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": "hi", "max_tokens": "5"})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": "hi", "max_tokens": 64})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": ")" + long_prompt + R"("})", 400, "prompt"},
      {C, R"({"model": "m", "prompt": "hi", "temperature": -0.1})", 400, "temperature"},
      {C, R"({"model": "m", "prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {C, R"({"model": "m", "prompt": "hi", "top_p": 0})", 400, "top_p"},
      {C, R"({"model": "m", "prompt": "hi", "top_p": 1.5})", 400, "top_p"},
      {C, R"({"model": "m", "prompt": "hi", "top_k": -2})", 400, "top_k"},
      {C, R"({"model": "m", "prompt": "hi", "n": 17})", 400, "n"},
      {C, R"({"model": "m", "prompt": "hi", "n": 0})", 400, "n"},
      {C, R"({"model": "m", "prompt": "hi", "n": 1.5})", 400, "n"},
      {C, R"({"model": "m", "prompt": "hi", "stream": "yes"})", 400, "stream"},
      {C, R"({"model": "m", "prompt": "hi", "stream_options": {"include_usage": true}})", 400,
       "stream_options"},
      {C, R"({"model": "m", "prompt": "hi", "stop": ""})", 400, "stop"},
      {C, R"({"model": "m", "prompt": "hi", "stop": ["a","b","c","d","e"]})", 400, "stop"},
      {C, R"({"model": "m", "prompt": "hi", "stop": 3})", 400, "stop"},
      {C, R"({"model": "m", "prompt": "hi", "seed": 1.5})", 400, "seed"},
      {C, R"({"model": "m", "prompt": "hi", "presence_penalty": 2.5})", 400, "presence_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "presence_penalty": "high"})", 400, "presence_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "frequency_penalty": -2.5})", 400, "frequency_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "min_p": 1.5})", 400, "min_p"},
      {C, R"({"model": "m", "prompt": "hi", "min_p": -0.1})", 400, "min_p"},
      {C, R"({"model": "m", "prompt": "hi", "repetition_penalty": 0})", 400, "repetition_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "repetition_penalty": 1e-50})", 400, "repetition_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "repetition_penalty": 11})", 400, "repetition_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "top_p": 1e-50})", 400, "top_p"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "frequency_penalty": 3})", 400,
       "frequency_penalty"},
      {C, R"({"model": "m", "prompt": "hi", "echo": "yes"})", 400, "echo"},
      {C, R"({"model": "m", "prompt": "hi", "logprobs": 21})", 400, "logprobs"},
      {C, R"({"model": "m", "prompt": "hi", "logprobs": -1})", 400, "logprobs"},
      {C, R"({"model": "m", "prompt": "hi", "logprobs": true})", 400, "logprobs"},
      {C, R"({"model": "m", "prompt": "hi", "logprobs": 1.5})", 400, "logprobs"},
      {C, R"({"model": "m", "prompt": "hi", "top_logprobs": 2})", 400, "top_logprobs"},
      {C, R"({"model": "m", "prompt": "hi", "logprobs": 1, "max_tokens": 0})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": "hi", "echo": false, "max_tokens": 0})", 400, "max_tokens"},
      {C, R"({"model": "m", "prompt": ")" + long_prompt + R"(", "echo": true, "max_tokens": 0})", 400,
       "prompt"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "echo": true})", 400, "echo"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": 2})", 400,
       "logprobs"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": "yes"})", 400,
       "logprobs"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", 400,
       "top_logprobs"},
      {H,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": false, "top_logprobs": 3})",
       400, "top_logprobs"},
      {H,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
       400, "top_logprobs"},
      {H,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": -1})",
       400, "top_logprobs"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
       400, "max_completion_tokens"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 17})", 400, "n"},
      {H, R"({"model": "m", "messages": []})", 400, "messages"},
      {H, R"({"model": "m", "messages": "hi"})", 400, "messages"},
      {H, R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})", 400, "messages[0].role"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})", 400,
       "messages[0].content"},
      {H,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": true}})",
       400, "response_format"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x", "extra": 1}]})", 400,
       "messages[0].extra"},
      {H, R"({"model": "m", "prompt": "hi"})", 400, "prompt"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]})", 400, "tools"},
      {H, R"({"model": "m", "messages": [{"role": "user", "content": ")" + long_prompt + R"("}]})", 400,
       "messages"},
  };
  for (const auto& c : cases) {
    const auto [status, param] = error_of(c.e, c.body);
    EXPECT_EQ(status, c.status) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
  }
}

// A deeply nested value in any field (within a 1 MB body), a value nested
// just under the cap in a field that is only checked for being neutral, and
// duplicate keys: each a 400 with a short message, never a crash (the
// parser's depth cap; no recursive print of a client value).
TEST_F(ApiTest, HostileJsonInEveryFieldIs400) {
  const std::vector<std::string> fields = {"model",
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
                                           "prompt",
                                           "echo",
                                           "best_of",
                                           "suffix",
                                           "messages",
                                           "max_completion_tokens",
                                           "top_logprobs",
                                           "response_format",
                                           "tools",
                                           "tool_choice",
                                           "parallel_tool_calls",
                                           "store",
                                           "metadata"};
  const int kDeep = 400000;  // ~800 KB
  const std::string deep = std::string(kDeep, '[') + std::string(kDeep, ']');
  const std::string deep_obj = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += R"({"a":)";
    s += "1";
    s += std::string(100000, '}');
    return s;
  }();
  std::string shallow = "1";  // 60 levels: under the cap
  for (int i = 0; i < 60; ++i) shallow = (i % 2 ? R"({"k":)" + shallow + "}" : "[" + shallow + "]");
  for (const Endpoint e : {Endpoint::kCompletions, Endpoint::kChat}) {
    const std::string input =
        e == Endpoint::kChat ? R"("messages": [{"role": "user", "content": "x"}])" : R"("prompt": "hi")";
    for (const auto& f : fields) {
      for (const std::string* v : std::initializer_list<const std::string*>{&deep, &deep_obj, &shallow}) {
        if (v == &shallow && (f == "parallel_tool_calls" || f == "store" || f == "metadata"))
          continue;  // accepted and ignored at any (capped) depth
        const std::string body = "{\"model\": \"m\", " + input + ", \"" + f + "\": " + *v + "}";
        try {
          parse_request(e, body, ctx_);
          ADD_FAILURE() << f << " accepted";
        } catch (const ApiError& err) {
          EXPECT_EQ(err.status(), 400) << f;
          EXPECT_LT(std::string(err.what()).size(), 400u) << f << ": " << err.what();
        }
      }
    }
  }
  const std::string too_deep = std::string(65, '[') + std::string(65, ']');
  try {
    parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "hi", "logit_bias": )" + too_deep + "}",
                  ctx_);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& err) {
    EXPECT_NE(std::string(err.what()).find("nested deeper than 64 levels"), std::string::npos) << err.what();
  }
  try {
    parse_request(Endpoint::kCompletions,
                  R"({"model": "m", "prompt": "hi", "max_tokens": 3, "max_tokens": 5})", ctx_);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), 400);
    EXPECT_NE(std::string(err.what()).find("duplicate key 'max_tokens'"), std::string::npos) << err.what();
  }
  // A long unknown key or model name is echoed clipped.
  const std::string long_key(100000, 'k');
  EXPECT_EQ(
      error_of(Endpoint::kCompletions, R"({"model": "m", "prompt": "hi", ")" + long_key + R"(": 1})").first,
      400);
  try {
    parse_request(Endpoint::kCompletions, R"({"model": ")" + long_key + R"(", "prompt": "hi"})", ctx_);
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), 404);
    EXPECT_LT(std::string(err.what()).size(), 300u);
  }
}

TEST_F(ApiTest, CompletionDefaultsAndFields) {
  const ApiRequest r = parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "Hello"})", ctx_);
  EXPECT_EQ(r.gen.prompt, encode_completion_prompt(*tok_, "Hello"));
  EXPECT_EQ(r.gen.max_tokens, 16);
  EXPECT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_FALSE(r.stream);
  const ApiRequest s = parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": [1, 2, 3],
      "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 7, "seed": 42, "stop": ["x", "yz"],
      "stream": true, "stream_options": {"include_usage": true}, "n": 1, "user": "u",
      "presence_penalty": 0, "logprobs": null, "suffix": null, "ignore_eos": true})",
                                     ctx_);
  EXPECT_FALSE(r.gen.ignore_eos);
  EXPECT_TRUE(s.gen.ignore_eos);
  EXPECT_EQ(s.gen.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(s.gen.max_tokens, 5);
  EXPECT_EQ(s.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(s.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(s.gen.sampling.top_k, 7);
  EXPECT_EQ(s.gen.sampling.seed, 42u);
  EXPECT_EQ(s.gen.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage);
}

// "speculative": the request's value, else the server's default; under
// futr serve's auto (speculative_greedy_only) the default drafts only greedy
// requests (temperature 0), on both endpoints.
TEST_F(ApiTest, SpeculativeFieldAndTheServersDefault) {
  const auto draft = [&](Endpoint e, const std::string& fields) {
    const std::string input =
        e == Endpoint::kChat ? R"("messages": [{"role": "user", "content": "Hi"}])" : R"("prompt": "Hi")";
    return parse_request(e, R"({"model": "m", )" + input + fields + "}", ctx_).gen.speculative;
  };
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChat}) {
    // Off (the default of ApiContext).
    EXPECT_EQ(draft(e, R"(, "temperature": 0)"), 0);
    EXPECT_EQ(draft(e, R"(, "speculative": true)"), 8);
    EXPECT_EQ(draft(e, R"(, "speculative": 3)"), 3);
    // ngram: every request without the field.
    ctx_.speculative = 6;
    EXPECT_EQ(draft(e, R"(, "temperature": 0)"), 6);
    EXPECT_EQ(draft(e, R"(, "temperature": 0.7)"), 6);
    EXPECT_EQ(draft(e, ""), 6);
    EXPECT_EQ(draft(e, R"(, "speculative": true)"), 6);
    // auto: greedy ones only; the field overrides it either way.
    ctx_.speculative_greedy_only = true;
    EXPECT_EQ(draft(e, R"(, "temperature": 0)"), 6);
    EXPECT_EQ(draft(e, R"(, "temperature": null)"), 0);  // OpenAI's default, 1
    EXPECT_EQ(draft(e, ""), 0);
    EXPECT_EQ(draft(e, R"(, "temperature": 0.7)"), 0);
    EXPECT_EQ(draft(e, R"(, "temperature": 0, "speculative": false)"), 0);
    EXPECT_EQ(draft(e, R"(, "temperature": 0, "speculative": 0)"), 0);
    EXPECT_EQ(draft(e, R"(, "temperature": 0.7, "speculative": true)"), 6);
    EXPECT_EQ(draft(e, R"(, "temperature": 0.7, "speculative": 2)"), 2);
    EXPECT_EQ(draft(e, R"(, "temperature": 0, "speculative": null)"), 6);
    ctx_.speculative = 0;
    ctx_.speculative_greedy_only = false;
    // An engine that cannot drop the rows of rejected drafts: a request
    // asking for drafts is refused naming why; one turning them off is not.
    ctx_.speculative_unsupported = "its state depends on every row";
    const std::string input =
        e == Endpoint::kChat ? R"("messages": [{"role": "user", "content": "Hi"}])" : R"("prompt": "Hi")";
    for (const char* ask : {R"(, "speculative": true)", R"(, "speculative": 3)"})
      EXPECT_EQ(error_of(e, R"({"model": "m", )" + input + ask + "}"),
                (std::pair<int, std::string>{400, "speculative"}))
          << ask;
    EXPECT_EQ(draft(e, R"(, "speculative": false)"), 0);
    EXPECT_EQ(draft(e, R"(, "temperature": 0)"), 0);
    ctx_.speculative_unsupported.clear();
  }
}

// min_p, repetition_penalty, presence_penalty and frequency_penalty land in
// the SamplerConfig (penalties over the whole sequence); absent, they are off.
TEST_F(ApiTest, PenaltiesAndMinPReachTheSampler) {
  const ApiRequest d = parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "Hello"})", ctx_);
  EXPECT_EQ(d.gen.sampling.min_p, 0.0f);
  EXPECT_EQ(d.gen.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(d.gen.sampling.presence_penalty, 0.0f);
  EXPECT_EQ(d.gen.sampling.frequency_penalty, 0.0f);
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChat}) {
    const std::string input =
        e == Endpoint::kChat ? R"("messages": [{"role": "user", "content": "Hi"}])" : R"("prompt": "Hi")";
    const ApiRequest r = parse_request(e, R"({"model": "m", )" + input + R"(, "min_p": 0.05,
        "repetition_penalty": 1.3, "presence_penalty": -0.5, "frequency_penalty": 2})",
                                       ctx_);
    const SamplerConfig& s = r.gen.sampling;
    EXPECT_EQ(s.min_p, 0.05f);
    EXPECT_EQ(s.repetition_penalty, 1.3f);
    EXPECT_EQ(s.presence_penalty, -0.5f);
    EXPECT_EQ(s.frequency_penalty, 2.0f);
    EXPECT_EQ(s.penalty_last_n, 0);
  }
  // The message names the field and its range.
  try {
    parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "hi", "presence_penalty": 2.5})", ctx_);
    ADD_FAILURE() << "presence_penalty 2.5 was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
    EXPECT_NE(std::string(e.what()).find("'presence_penalty' must be in [-2, 2]"), std::string::npos)
        << e.what();
  }
}

// The server accepts a value exactly when the sampler (and so `futr generate`'s
// flags and the engine) does: one set of ranges, runtime/sampler.h's.
TEST_F(ApiTest, SamplingRangesAreTheSamplersRanges) {
  struct Field {
    const char* name;
    float SamplerConfig::*member;
    std::vector<double> values;
  };
  const std::vector<Field> fields = {
      {"min_p", &SamplerConfig::min_p, {-0.01, 0, 0.5, 1, 1.01}},
      {"repetition_penalty", &SamplerConfig::repetition_penalty, {-1, 0, 1e-50, 0.01, 1, 10, 10.01}},
      {"presence_penalty", &SamplerConfig::presence_penalty, {-2.01, -2, 0, 2, 2.01}},
      {"frequency_penalty", &SamplerConfig::frequency_penalty, {-2.01, -2, 0, 2, 2.01}},
      {"top_p", &SamplerConfig::top_p, {-1, 0, 1e-50, 0.5, 1, 1.01}},
  };
  for (const Field& f : fields)
    for (double v : f.values) {
      SamplerConfig c;
      c.*f.member = float(v);
      bool sampler_ok = true;
      try {
        runtime::validate_sampler_config(c, "");
      } catch (const Error&) {
        sampler_ok = false;
      }
      const auto [status, param] = error_of(
          Endpoint::kCompletions, fmt::format(R"({{"model": "m", "prompt": "hi", "{}": {}}})", f.name, v));
      EXPECT_EQ(status == 0, sampler_ok) << f.name << " = " << v;
      if (status != 0) {
        EXPECT_EQ(param, f.name) << v;
      }
    }
}

TEST_F(ApiTest, ChatUsesTheTemplateAndTheRestOfTheContext) {
  const ApiRequest r = parse_request(Endpoint::kChat, R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})",
                                     ctx_);
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(r.gen.prompt, encode_chat_prompt(*tok_, *chat_, m));
  EXPECT_EQ(r.gen.max_tokens, 64 - int(r.gen.prompt.size()));
}

// logprobs, top_logprobs, echo and n reach the generation parameters: the
// choices get seeds seed, seed + 1, ...; echo with logprobs scores the
// prompt with the same k; echo allows max_tokens 0 (lm-evaluation-harness's
// loglikelihood request) and a prompt that fills the context then.
TEST_F(ApiTest, LogprobsEchoAndChoices) {
  const ApiRequest d = parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "Hello"})", ctx_);
  EXPECT_EQ(d.n, 1);
  EXPECT_EQ(d.logprobs, -1);
  EXPECT_EQ(d.gen.logprobs, -1);
  EXPECT_EQ(d.gen.prompt_logprobs, -1);
  EXPECT_FALSE(d.echo);
  const ApiRequest c = parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "Hello world",
      "logprobs": 3, "echo": true, "max_tokens": 0, "n": 3, "seed": -1})",
                                     ctx_);
  EXPECT_EQ(c.logprobs, 3);
  EXPECT_EQ(c.gen.logprobs, 3);
  EXPECT_EQ(c.gen.prompt_logprobs, 3);
  EXPECT_EQ(c.gen.max_tokens, 0);
  EXPECT_EQ(c.echo_text, "Hello world");
  const auto choices = choice_params(c);
  ASSERT_EQ(choices.size(), 3u);
  EXPECT_EQ(choices[0].sampling.seed, 18446744073709551615ull);
  EXPECT_EQ(choices[1].sampling.seed, 0u);  // mod 2^64
  EXPECT_EQ(choices[2].sampling.seed, 1u);
  EXPECT_EQ(choices[2].prompt, c.gen.prompt);
  // Neutral values stay neutral; echo alone scores nothing unless max_tokens is 0.
  for (const char* body : {R"({"model": "m", "prompt": "Hi", "logprobs": false})",
                           R"({"model": "m", "prompt": "Hi", "logprobs": null, "echo": false})"}) {
    const ApiRequest r = parse_request(Endpoint::kCompletions, body, ctx_);
    EXPECT_EQ(r.logprobs, -1) << body;
    EXPECT_EQ(r.gen.prompt_logprobs, -1) << body;
  }
  const ApiRequest e =
      parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "Hi", "echo": true})", ctx_);
  EXPECT_EQ(e.gen.prompt_logprobs, -1);
  EXPECT_EQ(e.gen.max_tokens, 16);
  const ApiRequest e0 = parse_request(
      Endpoint::kCompletions, R"({"model": "m", "prompt": "Hi", "echo": true, "max_tokens": 0})", ctx_);
  EXPECT_EQ(e0.gen.prompt_logprobs, 0);  // runs as a scoring request
  EXPECT_EQ(e0.logprobs, -1);            // whose scores are not returned
  // A prompt of exactly the context: only to score it.
  std::vector<int32_t> full(64, 100);
  json body = {{"model", "m"}, {"prompt", full}, {"echo", true}, {"max_tokens", 0}, {"logprobs", 0}};
  EXPECT_EQ(parse_request(Endpoint::kCompletions, body.dump(), ctx_).gen.prompt.size(), 64u);
  body.erase("max_tokens");
  EXPECT_EQ(error_of(Endpoint::kCompletions, body.dump()), (std::pair<int, std::string>{400, "prompt"}));

  // Chat: logprobs true with top_logprobs k; 0 and false are off.
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  const ApiRequest h = parse_request(
      Endpoint::kChat, R"({"model": "m", )" + msgs + R"(, "logprobs": true, "top_logprobs": 20, "n": 16})",
      ctx_);
  EXPECT_EQ(h.logprobs, 20);
  EXPECT_EQ(h.gen.logprobs, 20);
  EXPECT_EQ(h.gen.prompt_logprobs, -1);
  EXPECT_EQ(h.n, 16);
  EXPECT_EQ(
      parse_request(Endpoint::kChat, R"({"model": "m", )" + msgs + R"(, "logprobs": true})", ctx_).logprobs,
      0);
  for (const char* extra :
       {R"("logprobs": 0)", R"("logprobs": false, "top_logprobs": 0)", R"("top_logprobs": 0)"})
    EXPECT_EQ(parse_request(Endpoint::kChat, R"({"model": "m", )" + msgs + ", " + extra + "}", ctx_).logprobs,
              -1)
        << extra;
}

// n choices in one answer: index 0..n-1, the echoed prompt before each text,
// logprobs per choice (with echo: the prompt's first), usage with the prompt
// once and the completions summed.
TEST_F(ApiTest, ResponseWithChoicesAndLogprobs) {
  const ApiRequest r =
      parse_request(Endpoint::kCompletions,
                    R"({"model": "m", "prompt": "Hello", "echo": true, "logprobs": 1, "n": 2})", ctx_);
  const int32_t hello = r.gen.prompt.back();
  const auto ids = tok_->encode(" the end", false, false);
  std::vector<ChoiceOutput> choices(2);
  for (size_t i = 0; i < 2; ++i) {
    choices[i].text = i == 0 ? " the end" : "";
    choices[i].finish = i == 0 ? Finish::kLength : Finish::kStop;
    choices[i].completion_tokens = i == 0 ? int(ids.size()) : 0;
    for (int32_t t : r.gen.prompt) choices[i].prompt_logprobs.push_back({t, -1.0, true, {{t, -1.0}}});
    choices[i].prompt_logprobs[0] = {r.gen.prompt[0], 0.0, false, {}};
    if (i == 0)
      for (int32_t t : ids) choices[i].logprobs.push_back({t, -0.25, true, {{hello, -0.125}}});
  }
  const json j = full_response(r, tok_, ResponseMeta{"cmpl-1", 1, "m"}, choices);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], int(r.gen.prompt.size()));
  EXPECT_EQ(j["usage"]["completion_tokens"], int(ids.size()));
  const json& c0 = j["choices"][0];
  EXPECT_EQ(c0["index"], 0);
  EXPECT_EQ(c0["text"], "Hello the end");
  EXPECT_EQ(c0["finish_reason"], "length");
  const json& lp = c0["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), r.gen.prompt.size() + ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"].back().get<double>(), -0.25);
  EXPECT_EQ(lp["top_logprobs"].back()[token_string(*tok_, hello)].get<double>(), -0.125);
  EXPECT_EQ(lp["text_offset"][r.gen.prompt.size()].get<int>(), 5);  // " the" after "Hello"
  const json& c1 = j["choices"][1];
  EXPECT_EQ(c1["index"], 1);
  EXPECT_EQ(c1["text"], "Hello");
  EXPECT_EQ(c1["logprobs"]["tokens"].size(), r.gen.prompt.size());
  // Without logprobs: null, as before.
  const ApiRequest plain =
      parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "Hello", "n": 2})", ctx_);
  const json k = full_response(plain, nullptr, ResponseMeta{"cmpl-1", 1, "m"}, choices);
  EXPECT_TRUE(k["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(k["choices"][0]["text"], " the end");
  // A streaming chunk of choice 3 with its logprobs.
  const json ch = stream_chunk(Endpoint::kChat, ResponseMeta{"c", 1, "m"}, "x", Finish::kNone, false, 3,
                               json{{"content", json::array()}});
  EXPECT_EQ(ch["choices"][0]["index"], 3);
  EXPECT_TRUE(ch["choices"][0]["logprobs"]["content"].is_array());
}

TEST_F(ApiTest, ResponseShapes) {
  const ResponseMeta meta{"cmpl-1", 123, "m"};
  const json c = full_response(Endpoint::kCompletions, meta, "hi", Finish::kLength, 3, 2);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hi");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 5);
  const json h = full_response(Endpoint::kChat, meta, "hi", Finish::kStop, 3, 2);
  EXPECT_EQ(h["object"], "chat.completion");
  EXPECT_EQ(h["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(h["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(h["choices"][0]["finish_reason"], "stop");
  const json first = stream_chunk(Endpoint::kChat, meta, "", Finish::kNone, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = stream_chunk(Endpoint::kChat, meta, "", Finish::kStop);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json u = usage_chunk(Endpoint::kCompletions, meta, 3, 2);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  EXPECT_EQ(models_response("m", 1)["data"][0]["id"], "m");
}

}  // namespace
}  // namespace futr::server
