// Log-probabilities and n > 1 of `futr serve` on the real CPU engine and the
// default model, through the HTTP server:
//   - echo + logprobs + max_tokens 0 (lm-evaluation-harness's loglikelihood
//     request) gives every prompt token the value `futr perplexity`'s path
//     gives: a SequenceRunner's logits row through runtime::token_nll per
//     token, and evaluate_perplexity's kLogprob rows for the mean; the server
//     prefills in chunks of 16 rows, the reference in one step, so the values
//     agree within tol::kCpuChunkingLogprob;
//   - asking for logprobs does not change the tokens (the host sampler draws
//     what the CPU engine's sampler draws for the same seed), and the
//     generated tokens' logprobs are those of the raw distribution (checked
//     at temperature 0.8 against the reference's unscaled log softmax);
//   - n > 1: at temperature 0 n equal answers, at temperature 1 with a seed
//     the same choices every time, choice i the single answer for seed + i;
//   - streamed chunks with logprobs add up to the whole answer.
// Skips without the model (scripts/fetch-model.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "runtime/perplexity.h"
#include "served_model.h"
#include "server/prompt.h"
#include "support/tolerances.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

constexpr const char* kText =
    "The sun rose over the quiet village, and the baker opened his shop as he had done every morning for "
    "thirty years. Children ran past the window on their way to school, and the smell of fresh bread filled "
    "the narrow street.";

class ServeLogprobs : public ::testing::Test {
 protected:
  void SetUp() override {
    test::ServedModelOptions o;
    o.engine.engine = runtime::EngineKind::kCpu;
    o.engine.ctx = 512;
    o.engine.max_seqs = 4;
    o.engine.max_step_tokens = 16;  // prompts prefilled over several steps
    o.scheduler.max_step_tokens = 16;
    std::string why;
    served_ = test::ServedModel::start(o, &why);
    if (!served_) GTEST_SKIP() << why;
    runtime::RuntimeConfig cfg = o.engine;
    cfg.max_seqs = 1;
    cfg.max_step_tokens = 512;  // the reference: a prompt in one step
    reference_ = runtime::make_engine(served_->model(), cfg);
    tok_ = &served_->tok();
  }
  void TearDown() override {
    served_.reset();  // the server stops before the reference engine goes
  }
  json post(const std::string& path, json body) { return served_->post(path, std::move(body)); }
  std::string raw_post(const std::string& path, json body) {
    return served_->raw_post(path, std::move(body));
  }
  // log p(ids[i] | ids[0..i)) for i >= first, from the reference engine's logits.
  std::vector<double> reference_logprobs(const std::vector<int32_t>& ids, size_t first = 1) {
    runtime::SequenceRunner runner(*reference_);
    const Tensor logits = runner.eval(ids, 0);
    std::vector<double> out;
    for (size_t i = first; i < ids.size(); ++i)
      out.push_back(-runtime::token_nll({logits.row(int64_t(i - 1)), size_t(logits.dim(1))}, ids[i]));
    return out;
  }

  std::unique_ptr<test::ServedModel> served_;
  std::unique_ptr<runtime::Engine> reference_;
  const Tokenizer* tok_ = nullptr;
};

TEST_F(ServeLogprobs, EchoLogprobsAreThePerplexityPathsValues) {
  const std::vector<int32_t> ids = encode_completion_prompt(*tok_, kText);
  ASSERT_GT(ids.size(), 40u);  // several of the server's 16-row chunks
  const json r =
      post("/v1/completions", {{"prompt", kText}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}});
  const json& c = r["choices"][0];
  EXPECT_EQ(c["text"], kText);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], int(ids.size()));
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());

  const std::vector<double> ref = reference_logprobs(ids);
  double worst = 0, sum = 0;
  for (size_t i = 1; i < ids.size(); ++i) {
    const double got = lp["token_logprobs"][i].get<double>();
    sum += got;
    worst = std::max(worst, std::abs(got - ref[i - 1]));
    EXPECT_NEAR(got, ref[i - 1], test::tol::kCpuChunkingLogprob) << "token " << i;
    // top_logprobs: the most likely token and the chosen one.
    const json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 2u);
    double best = -INFINITY;
    for (const auto& [k, v] : top.items()) best = std::max(best, v.get<double>());
    EXPECT_GE(best, got);
  }
  std::printf("prompt of %zu tokens: largest |server - SequenceRunner| %.3g\n", ids.size(), worst);

  // `futr perplexity`'s own loop (kLogprob rows), one window over the prompt.
  const runtime::PplResult ppl =
      runtime::evaluate_perplexity(*reference_, ids, int(ids.size()), int(ids.size()), 512);
  ASSERT_EQ(ppl.stats.count(), int64_t(ids.size()) - 1);
  EXPECT_NEAR(-sum / double(ids.size() - 1), ppl.stats.mean(), test::tol::kCpuChunkingLogprob);
}

TEST_F(ServeLogprobs, LogprobsChangeNoTokenAndAreTheRawDistributions) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0.8}, {"seed", 7}};
  const std::string plain = post("/v1/completions", base)["choices"][0]["text"];
  json with = base;
  with["logprobs"] = 3;
  const json r = post("/v1/completions", with);
  EXPECT_EQ(r["choices"][0]["text"], plain);
  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me a story."}}})},
               {"max_tokens", 24},
               {"temperature", 0.8},
               {"seed", 3}};
  const std::string chat_plain = post("/v1/chat/completions", chat)["choices"][0]["message"]["content"];
  chat["logprobs"] = true;
  chat["top_logprobs"] = 5;
  const json rc = post("/v1/chat/completions", chat);
  EXPECT_EQ(rc["choices"][0]["message"]["content"], chat_plain);
  ASSERT_FALSE(rc["choices"][0]["logprobs"]["content"].empty());
  EXPECT_EQ(rc["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 5u);

  // The values (with the token ids, through the scheduler): log softmax of the
  // raw logits, not of logits / temperature.
  GenerationParams p;
  p.prompt = encode_completion_prompt(*tok_, "Once upon a time");
  p.max_tokens = 24;
  p.sampling.temperature = 0.8f;
  p.sampling.top_p = 1.0f;
  p.sampling.top_k = 0;
  p.sampling.seed = 7;
  p.logprobs = 0;
  auto req = served_->scheduler().submit(p);
  std::vector<TokenLogprob> got;
  std::string text;
  for (Request::Update u; !u.done;) {
    ASSERT_TRUE(req->wait(u, std::chrono::milliseconds(60000)));
    got.insert(got.end(), u.logprobs.begin(), u.logprobs.end());
    text += u.text;
  }
  EXPECT_EQ(text, plain);
  ASSERT_FALSE(got.empty());
  std::vector<int32_t> ids = p.prompt;
  for (const TokenLogprob& e : got) ids.push_back(e.token);
  const std::vector<double> ref = reference_logprobs(ids, p.prompt.size());
  ASSERT_EQ(ref.size(), got.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].logprob, ref[i], test::tol::kCpuChunkingLogprob) << "token " << i;
    worst = std::max(worst, std::abs(got[i].logprob - ref[i]));
  }
  std::printf("%zu generated tokens: largest |server - SequenceRunner| %.3g\n", got.size(), worst);
}

TEST_F(ServeLogprobs, ChoicesGreedyEqualSeededReproducible) {
  const json greedy = {{"prompt", "The capital of France is"}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string one = post("/v1/completions", greedy)["choices"][0]["text"];
  json g4 = greedy;
  g4["n"] = 4;
  const json r4 = post("/v1/completions", g4);
  ASSERT_EQ(r4["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r4["choices"][i]["index"], i);
    EXPECT_EQ(r4["choices"][i]["text"], one) << "choice " << i;
  }
  EXPECT_EQ(r4["usage"]["completion_tokens"], 48);

  const json sampled = {
      {"prompt", "Write a word:"}, {"max_tokens", 8}, {"temperature", 1}, {"seed", 11}, {"n", 3}};
  const json a = post("/v1/completions", sampled), b = post("/v1/completions", sampled);
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]) << "choice " << i;
    json single = sampled;
    single["n"] = 1;
    single["seed"] = 11 + i;
    EXPECT_EQ(post("/v1/completions", single)["choices"][0]["text"], a["choices"][i]["text"])
        << "choice " << i;
    distinct.insert(a["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u);
}

TEST_F(ServeLogprobs, StreamedLogprobsAddUpToTheAnswer) {
  const json body = {{"prompt", "The quick brown fox"},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"echo", true},
                     {"logprobs", 2}};
  const json whole = post("/v1/completions", body)["choices"][0];
  json sb = body;
  sb["stream"] = true;
  const std::string events = raw_post("/v1/completions", sb);
  std::string text;
  json lp = {{"tokens", json::array()},
             {"token_logprobs", json::array()},
             {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  for (size_t at = 0; (at = events.find("data: ", at)) != std::string::npos;) {
    const size_t end = events.find("\n\n", at);
    const std::string data = events.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const json c = json::parse(data)["choices"][0];
    text += c["text"].get<std::string>();
    if (!c["logprobs"].is_null())
      for (const char* f : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const auto& x : c["logprobs"][f]) lp[f].push_back(x);
  }
  EXPECT_EQ(text, whole["text"]);
  EXPECT_EQ(lp, whole["logprobs"]);
}

}  // namespace
}  // namespace futr::server
