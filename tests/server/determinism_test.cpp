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
#include <httplib.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include "formats/loader.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

class ServeDeterminism : public ::testing::TestWithParam<Fp8Scaling> {
 protected:
  void SetUp() override {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(FUTR_DEFAULT_MODEL, ec))
      GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)";
    model_ = std::make_unique<Model>(load_model(FUTR_DEFAULT_MODEL));
    tok_ = std::make_unique<Tokenizer>(model_->tokenizer);
    chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_tokenizer(*tok_));
    runtime::RuntimeConfig cfg;
    cfg.engine = runtime::EngineKind::kAuto;
    cfg.ctx = 512;
    cfg.max_seqs = 8;
    cfg.max_step_tokens = 64;  // prompt chunks of several steps beside decode rows
    cfg.fp8.scaling = GetParam();
    engine_ = runtime::make_engine(*model_, cfg, [](const std::string& s) { std::printf("futr: %s\n", s.c_str()); });
    if (GetParam() == Fp8Scaling::kDelayed && engine_->info().name != "gpu")
      GTEST_SKIP() << "--fp8-scaling applies to the GPU engine's FP8 prefill path (engine: " << engine_->info().name
                   << ")";
    SchedulerOptions so;
    so.max_step_tokens = cfg.max_step_tokens;
    scheduler_ = std::make_unique<Scheduler>(*engine_, *tok_, so, &metrics_);
    HttpOptions ho;
    ho.port = 0;
    ho.model = "m";
    server_ = std::make_unique<HttpServer>(*scheduler_, *tok_, chat_.get(), metrics_, ho);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  // The greedy answer to one user message.
  std::string ask(const std::string& question) {
    httplib::Client cl("127.0.0.1", port_);
    cl.set_read_timeout(300, 0);
    const json body = {{"model", "m"},
                       {"messages", json::array({{{"role", "user"}, {"content", question}}})},
                       {"max_tokens", 16},
                       {"temperature", 0}};
    auto r = cl.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!r || r->status != 200) {
      ADD_FAILURE() << "request failed: " << (r ? r->body : std::string("no response"));
      return "";
    }
    return json::parse(r->body)["choices"][0]["message"]["content"].get<std::string>();
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<runtime::Engine> engine_;
  Metrics metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_P(ServeDeterminism, TheSameGreedyRequestGivesOneAnswer) {
  const std::string first = ask("What is the capital of France?");
  std::printf("engine %s: %s\n", engine_->info().name.c_str(), first.c_str());
  EXPECT_FALSE(first.empty());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ask("What is the capital of France?"), first) << "repeat " << i + 1;
}

TEST_P(ServeDeterminism, ConcurrentRequestsGetTheirSequentialAnswers) {
  const std::vector<std::string> qs = {"What is the capital of France?",
                                       "Name three colours of the rainbow.",
                                       "Write one sentence about the sea.",
                                       "What is 12 times 12?",
                                       "Who wrote Hamlet? Answer briefly, then explain why the play is famous.",
                                       "List two planets."};
  std::vector<std::string> alone;
  for (const std::string& q : qs) alone.push_back(ask(q));
  std::vector<std::future<std::string>> together;
  for (const std::string& q : qs) together.push_back(std::async(std::launch::async, [&, q] { return ask(q); }));
  for (size_t i = 0; i < qs.size(); ++i)
    EXPECT_EQ(together[i].get(), alone[i]) << "request " << i << " (" << qs[i] << ")";
}

INSTANTIATE_TEST_SUITE_P(Fp8Scaling, ServeDeterminism, ::testing::Values(Fp8Scaling::kStatic, Fp8Scaling::kDelayed),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace futr::server
