// futr serve at temperature 0 gives one answer: the real engine of
// `--backend auto` (the CPU engine without a GPU, the GPU engine with its
// defaults on a Hopper GPU) behind the scheduler and the HTTP server, on the
// default model:
//   - the same greedy chat request sent five times in a row: one text;
//   - six different greedy requests sent one at a time, then all at once
//     (continuous batching mixes their prompt chunks and decode rows in the
//     same steps): the same six texts.
// With a GPU also under --fp8-scaling delayed (each request its own scale
// state). Skips without the model (scripts/fetch-model.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <future>

#include "served_model.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

class ServeDeterminism : public ::testing::TestWithParam<Fp8Scaling> {
 protected:
  void SetUp() override {
    test::ServedModelOptions o;
    o.engine.engine = runtime::EngineKind::kAuto;
    o.engine.ctx = 512;
    o.engine.max_seqs = 8;
    o.engine.max_step_tokens = 64;  // prompt chunks of several steps beside decode rows
    o.engine.fp8.scaling = GetParam();
    o.scheduler.max_step_tokens = o.engine.max_step_tokens;
    o.log = true;
    std::string why;
    served_ = test::ServedModel::start(o, &why);
    if (!served_) GTEST_SKIP() << why;
    if (GetParam() == Fp8Scaling::kDelayed && served_->engine().info().name != "gpu")
      GTEST_SKIP() << "--fp8-scaling applies to the GPU engine's FP8 prefill path (engine: "
                   << served_->engine().info().name << ")";
  }
  // The greedy answer to one user message.
  std::string ask(const std::string& question) {
    const json r = served_->post("/v1/chat/completions",
                                 {{"messages", json::array({{{"role", "user"}, {"content", question}}})},
                                  {"max_tokens", 16},
                                  {"temperature", 0}});
    return r.contains("choices") ? r["choices"][0]["message"]["content"].get<std::string>() : "";
  }

  std::unique_ptr<test::ServedModel> served_;
};

TEST_P(ServeDeterminism, TheSameGreedyRequestGivesOneAnswer) {
  const std::string first = ask("What is the capital of France?");
  std::printf("engine %s: %s\n", served_->engine().info().name.c_str(), first.c_str());
  EXPECT_FALSE(first.empty());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ask("What is the capital of France?"), first) << "repeat " << i + 1;
}

TEST_P(ServeDeterminism, ConcurrentRequestsGetTheirSequentialAnswers) {
  const std::vector<std::string> qs = {
      "What is the capital of France?",
      "Name three colours of the rainbow.",
      "Write one sentence about the sea.",
      "What is 12 times 12?",
      "Who wrote Hamlet? Answer briefly, then explain why the play is famous.",
      "List two planets."};
  std::vector<std::string> alone;
  for (const std::string& q : qs) alone.push_back(ask(q));
  std::vector<std::future<std::string>> together;
  for (const std::string& q : qs)
    together.push_back(std::async(std::launch::async, [&, q] { return ask(q); }));
  for (size_t i = 0; i < qs.size(); ++i)
    EXPECT_EQ(together[i].get(), alone[i]) << "request " << i << " (" << qs[i] << ")";
}

INSTANTIATE_TEST_SUITE_P(Fp8Scaling, ServeDeterminism,
                         ::testing::Values(Fp8Scaling::kStatic, Fp8Scaling::kDelayed),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace futr::server
