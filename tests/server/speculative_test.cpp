// Speculative decoding in `futr serve` (the request field "speculative"): on
// the default model through the HTTP server, on the real CPU engine with a
// contiguous and a paged KV cache, and on the GPU engine (`--backend auto` on
// a Hopper GPU: a draft's rows are several rows of one sequence in one step):
//   - a request with drafts gives the text of the same request without them,
//     greedy and sampled with a seed, with logprobs and a stop string, and
//     drafts are accepted on text that repeats its prompt (the metrics);
//   - requests with and without drafts sent together give the texts they
//     give alone;
//   - bad values are refused naming the field;
//   - the server's default (futr serve --speculative auto): a greedy request
//     without the field drafts and gives the text of a server with
//     --speculative off, a sampled one does not draft, "speculative": false
//     and true override it; --speculative off drafts only on request; auto
//     is off on an engine that cannot drop the rows of rejected drafts.
// Skips without the model (scripts/fetch-model.sh); the GPU case without a GPU.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "served_model.h"
#include "server/fake_engine.h"
#include "support/expect_error.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

// Text that quotes itself: prompt lookup finds what comes next.
constexpr const char* kRepeating =
    "The old man walked to the river every morning. He sat on the bench by the water and fed the ducks. "
    "The old man walked to the river every morning. He sat on the bench by the water and fed the";

// A counter of the server's /metrics (-1: absent).
double metric_of(int port, const std::string& name) {
  httplib::Client cl("127.0.0.1", port);
  auto r = cl.Get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
}

std::string text_of(const json& r) {
  return r.contains("choices") ? r["choices"][0]["text"].get<std::string>() : std::string("<no answer>");
}

struct Case {
  runtime::EngineKind engine;
  int kv_block_size;  // 0: contiguous; 16: paged
  const char* name;
};

// The served model of a case: 4 sequences of 512 positions, steps of 64 tokens.
test::ServedModelOptions options_of(const Case& c) {
  test::ServedModelOptions o;
  o.engine.engine = c.engine;
  o.engine.ctx = 512;
  o.engine.max_seqs = 4;
  o.engine.max_step_tokens = 64;
  o.engine.kv_block_size = c.kv_block_size;
  o.scheduler.max_step_tokens = 64;
  return o;
}

class ServeSpeculative : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const test::ServedModelOptions o = options_of(GetParam());
    std::string why;
    served_ = test::ServedModel::start(o, &why);
    if (!served_) GTEST_SKIP() << why;
    if (GetParam().engine == runtime::EngineKind::kAuto && served_->engine().info().name != "gpu")
      GTEST_SKIP() << "no Hopper GPU: --backend auto is the CPU engine (the cpu cases)";
  }
  json complete(json body, int speculative) {
    body["prompt"] = body.value("prompt", std::string(kRepeating));
    body["speculative"] = speculative;
    return served_->post("/v1/completions", body);
  }
  double metric(const std::string& name) { return metric_of(served_->port(), name); }

  std::unique_ptr<test::ServedModel> served_;
};

TEST_P(ServeSpeculative, DraftsGiveTheTokensOfOrdinaryDecoding) {
  const double accepted0 = metric("futr_speculative_accepted_tokens_total");
  // Greedy.
  const json greedy = {{"max_tokens", 40}, {"temperature", 0}};
  const std::string plain = text_of(complete(greedy, 0));
  EXPECT_EQ(text_of(complete(greedy, 8)), plain);
  EXPECT_EQ(text_of(complete(greedy, 1)), plain);
  EXPECT_GT(metric("futr_speculative_accepted_tokens_total"), accepted0)
      << "no draft was accepted on repeating text";
  // Sampled with a seed, penalties, logprobs: the same draws.
  const json sampled = {{"max_tokens", 40}, {"temperature", 0.8},      {"top_p", 0.95},
                        {"seed", 7},        {"presence_penalty", 0.3}, {"logprobs", 2}};
  const json a = complete(sampled, 0), b = complete(sampled, 6);
  EXPECT_EQ(text_of(b), text_of(a));
  ASSERT_TRUE(a.contains("choices") && b.contains("choices"));
  EXPECT_EQ(b["choices"][0]["logprobs"], a["choices"][0]["logprobs"]);
  // A stop string inside an accepted draft, and max_tokens inside a draft.
  const json stop = {{"max_tokens", 60}, {"temperature", 0}, {"stop", {"ducks"}}};
  EXPECT_EQ(text_of(complete(stop, 8)), text_of(complete(stop, 0)));
  const json shortish = {{"max_tokens", 3}, {"temperature", 0}};
  EXPECT_EQ(text_of(complete(shortish, 8)), text_of(complete(shortish, 0)));
}

TEST_P(ServeSpeculative, TogetherAsAlone) {
  const std::vector<std::pair<std::string, int>> reqs = {
      {kRepeating, 8}, {"Once upon a time there was a", 0}, {kRepeating, 4}, {"List three colours:", 8}};
  auto body = [](const std::string& prompt) {
    return json{{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
  };
  std::vector<std::string> alone;
  for (const auto& [p, k] : reqs) alone.push_back(text_of(complete(body(p), k)));
  std::vector<std::future<std::string>> together;
  for (const auto& [p, k] : reqs)
    together.push_back(
        std::async(std::launch::async, [&, p = p, k = k] { return text_of(complete(body(p), k)); }));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i].get(), alone[i]) << "request " << i;
}

TEST_P(ServeSpeculative, BadValuesAreRefusedNamingTheField) {
  for (const json& v : {json(-1), json(kMaxSpeculative + 1), json("yes"), json(1.5)}) {
    json body = {{"prompt", "Hi"}, {"max_tokens", 2}, {"speculative", v}};
    const std::string r = served_->raw_post("/v1/completions", body);
    EXPECT_NE(r.find("\"param\":\"speculative\""), std::string::npos) << v.dump() << ": " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, ServeSpeculative,
                         ::testing::Values(Case{runtime::EngineKind::kCpu, 0, "cpu_contiguous"},
                                           Case{runtime::EngineKind::kCpu, 16, "cpu_paged"},
                                           Case{runtime::EngineKind::kAuto, 0, "gpu"}),
                         [](const auto& info) { return std::string(info.param.name); });

// The server's default for requests without "speculative": futr serve's
// --speculative auto (the default) and --speculative off, each a server of
// its own on the same engine configuration.
class ServeSpeculativeDefault : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<test::ServedModel> serve(const std::string& mode) {
    test::ServedModelOptions o = options_of(GetParam());
    o.speculative_mode = mode;
    o.draft_max = 8;
    std::string why;
    auto served = test::ServedModel::start(o, &why);
    if (!served) skip_ = why;
    return served;
  }
  void SetUp() override {
    auto_ = serve(kDefaultSpeculativeMode);
    if (!auto_) GTEST_SKIP() << skip_;
    if (GetParam().engine == runtime::EngineKind::kAuto && auto_->engine().info().name != "gpu")
      GTEST_SKIP() << "no Hopper GPU: --backend auto is the CPU engine (the cpu cases)";
    ASSERT_EQ(auto_->speculative_note(), "") << "this engine drops the rows of rejected drafts";
    off_ = serve("off");
    ASSERT_TRUE(off_);
  }
  // Completes kRepeating with `body`'s parameters on `served`; *drafted (may
  // be null): the draft tokens the request ran (the metrics' counter grew by).
  static json complete(test::ServedModel& served, json body, double* drafted = nullptr) {
    body["prompt"] = body.value("prompt", std::string(kRepeating));
    const double d0 = metric_of(served.port(), "futr_speculative_draft_tokens_total");
    const json r = served.post("/v1/completions", body);
    if (drafted) *drafted = metric_of(served.port(), "futr_speculative_draft_tokens_total") - d0;
    return r;
  }

  std::string skip_;
  std::unique_ptr<test::ServedModel> auto_, off_;
};

TEST_P(ServeSpeculativeDefault, AutoDraftsGreedyRequestsTheTextOfOff) {
  double drafted = 0;
  const json greedy = {{"max_tokens", 40}, {"temperature", 0}};
  const std::string plain = text_of(complete(*off_, greedy, &drafted));
  EXPECT_EQ(drafted, 0) << "--speculative off drafted for a request without the field";
  EXPECT_EQ(text_of(complete(*auto_, greedy, &drafted)), plain);
  EXPECT_GT(drafted, 0) << "a greedy request without \"speculative\" ran no draft under auto";
  // Chat too, and a stop string.
  const json chat = {{"messages", {{{"role", "user"}, {"content", std::string("Repeat: ") + kRepeating}}}},
                     {"max_tokens", 32},
                     {"temperature", 0}};
  const json a = off_->post("/v1/chat/completions", chat), b = auto_->post("/v1/chat/completions", chat);
  ASSERT_TRUE(a.contains("choices") && b.contains("choices"));
  EXPECT_EQ(b["choices"][0]["message"]["content"], a["choices"][0]["message"]["content"]);
  const json stop = {{"max_tokens", 60}, {"temperature", 0}, {"stop", {"ducks"}}};
  EXPECT_EQ(text_of(complete(*auto_, stop)), text_of(complete(*off_, stop)));
}

TEST_P(ServeSpeculativeDefault, AutoDoesNotDraftSampledRequests) {
  double drafted = -1;
  const json sampled = {{"max_tokens", 24}, {"temperature", 0.8}, {"seed", 7}};
  EXPECT_EQ(text_of(complete(*auto_, sampled, &drafted)), text_of(complete(*off_, sampled)));
  EXPECT_EQ(drafted, 0) << "a sampled request without \"speculative\" drafted under auto";
  // OpenAI's default temperature (1) samples too.
  complete(*auto_, {{"max_tokens", 8}, {"seed", 3}}, &drafted);
  EXPECT_EQ(drafted, 0) << "a request without a temperature (1: sampled) drafted under auto";
}

TEST_P(ServeSpeculativeDefault, TheRequestFieldOverridesTheDefault) {
  double drafted = -1;
  // false: no drafts for a greedy request under auto.
  const json greedy_off = {{"max_tokens", 24}, {"temperature", 0}, {"speculative", false}};
  const std::string plain = text_of(complete(*auto_, greedy_off, &drafted));
  EXPECT_EQ(drafted, 0) << "\"speculative\": false drafted";
  EXPECT_EQ(plain, text_of(complete(*off_, {{"max_tokens", 24}, {"temperature", 0}})));
  // true: drafts for a sampled request under auto, and for any under off.
  const json sampled_on = {{"max_tokens", 24}, {"temperature", 0.8}, {"seed", 7}, {"speculative", true}};
  EXPECT_EQ(text_of(complete(*auto_, sampled_on, &drafted)),
            text_of(complete(*off_, {{"max_tokens", 24}, {"temperature", 0.8}, {"seed", 7}})));
  EXPECT_GT(drafted, 0) << "\"speculative\": true on a sampled request ran no draft";
  EXPECT_EQ(text_of(complete(*off_, {{"max_tokens", 24}, {"temperature", 0}, {"speculative", 4}}, &drafted)),
            plain);
  EXPECT_GT(drafted, 0) << "\"speculative\": 4 under --speculative off ran no draft";
}

INSTANTIATE_TEST_SUITE_P(Engines, ServeSpeculativeDefault,
                         ::testing::Values(Case{runtime::EngineKind::kCpu, 0, "cpu_contiguous"},
                                           Case{runtime::EngineKind::kCpu, 16, "cpu_paged"},
                                           Case{runtime::EngineKind::kAuto, 0, "gpu"}),
                         [](const auto& info) { return std::string(info.param.name); });

// The modes on an engine: what set_speculative_default gives the server.
class NoRollbackEngine : public test::FakeEngine {
 public:
  using FakeEngine::FakeEngine;
  std::string rollback_unsupported_reason() const override { return "its state depends on every row"; }
};

TEST(ServeSpeculativeMode, AutoDraftsGreedyRequestsWhereTheEngineDropsRows) {
  test::FakeEngine::Options eo;
  eo.words = {5, 6, 7};
  const test::FakeEngine engine(eo);
  const NoRollbackEngine no_rollback(eo);
  EXPECT_STREQ(kDefaultSpeculativeMode, "auto");
  HttpOptions o;
  EXPECT_EQ(set_speculative_default(o, "auto", 6, engine), "");
  EXPECT_EQ(o.speculative, 6);
  EXPECT_TRUE(o.speculative_greedy_only);
  EXPECT_EQ(o.speculative_unsupported, "");
  EXPECT_EQ(set_speculative_default(o, "auto", std::nullopt, engine), "");
  EXPECT_EQ(o.speculative, runtime::default_draft_max(engine));  // no --draft-max: the engine's
  EXPECT_EQ(set_speculative_default(o, "ngram", 5, engine), "");
  EXPECT_EQ(o.speculative, 5);
  EXPECT_FALSE(o.speculative_greedy_only);
  for (const auto* e :
       {static_cast<const runtime::Engine*>(&engine), static_cast<const runtime::Engine*>(&no_rollback)}) {
    EXPECT_EQ(set_speculative_default(o, "off", 5, *e), "");
    EXPECT_EQ(o.speculative, 0);
    EXPECT_FALSE(o.speculative_greedy_only);
  }
  // An engine that cannot drop rows: auto drafts nothing and says why, a
  // request asking for drafts is refused (api_test), ngram refuses to start.
  EXPECT_EQ(set_speculative_default(o, "auto", 6, no_rollback), "its state depends on every row");
  EXPECT_EQ(o.speculative, 0);
  EXPECT_EQ(o.speculative_unsupported, "its state depends on every row");
  EXPECT_FUTR_ERROR(set_speculative_default(o, "ngram", 5, no_rollback), "its state depends on every row");
  EXPECT_THROW(set_speculative_default(o, "eagle", 5, engine), Error);
  EXPECT_FUTR_ERROR(set_speculative_default(o, "auto", 65, engine), "--draft-max");
}

}  // namespace
}  // namespace futr::server
