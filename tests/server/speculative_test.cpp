// Speculative decoding in `futr serve` (the request field "speculative"): on
// the default model through the HTTP server, on the real CPU engine with a
// contiguous and a paged KV cache, and on the GPU engine (`--backend auto` on
// a Hopper GPU: a draft's rows are several rows of one sequence in one step):
//   - a request with drafts gives the text of the same request without them,
//     greedy and sampled with a seed, with logprobs and a stop string, and
//     drafts are accepted on text that repeats its prompt (the metrics);
//   - requests with and without drafts sent together give the texts they
//     give alone;
//   - bad values are refused naming the field.
// Skips without the model (scripts/fetch-model.sh); the GPU case without a GPU.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "served_model.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

// Text that quotes itself: prompt lookup finds what comes next.
constexpr const char* kRepeating =
    "The old man walked to the river every morning. He sat on the bench by the water and fed the ducks. "
    "The old man walked to the river every morning. He sat on the bench by the water and fed the";

struct Case {
  runtime::EngineKind engine;
  int kv_block_size;  // 0: contiguous; 16: paged
  const char* name;
};

class ServeSpeculative : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    test::ServedModelOptions o;
    o.engine.engine = GetParam().engine;
    o.engine.ctx = 512;
    o.engine.max_seqs = 4;
    o.engine.max_step_tokens = 64;
    o.engine.kv_block_size = GetParam().kv_block_size;
    o.scheduler.max_step_tokens = 64;
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
  static std::string text_of(const json& r) {
    return r.contains("choices") ? r["choices"][0]["text"].get<std::string>() : std::string("<no answer>");
  }
  // A counter of /metrics (-1: absent).
  double metric(const std::string& name) {
    httplib::Client cl("127.0.0.1", served_->port());
    auto r = cl.Get("/metrics");
    if (!r) return -1;
    const size_t at = r->body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
  }

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

}  // namespace
}  // namespace futr::server
