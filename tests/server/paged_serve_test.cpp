// The scheduler over a real engine (the CPU engine; the GPU engine on a
// Hopper GPU, skipped with the reason without one) with a paged KV cache too
// small for its requests at once: every greedy answer equals the one the same
// server gives each request alone, preemptions happen, the prefix cache hits
// (a shared system prompt), and every block is free at the end. On the GPU the
// recomputed rows take the path they took the first time (prompt rows the
// FP8 prefill path, static scales; generated tokens the decode step), whose
// bits do not depend on the cut, so the answers are equal there too. The requests
// are queued in one call (all or none) while the engine is held
// (HeldEngine), so that they are admitted together and the preemptions do
// not depend on thread timing.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "formats/loader.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace futr::server {
namespace {

// An Engine that forwards to another and holds its steps until release().
class HeldEngine final : public runtime::Engine {
 public:
  explicit HeldEngine(runtime::Engine& e) : e_(e) {}
  void release() {
    {
      std::lock_guard lk(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  void hold() {
    std::lock_guard lk(mu_);
    held_ = true;
  }
  void open(runtime::SeqId id, const runtime::SamplerConfig& s = {}) override { e_.open(id, s); }
  void truncate(runtime::SeqId id, int len) override { e_.truncate(id, len); }
  void close(runtime::SeqId id) override { e_.close(id); }
  bool is_open(runtime::SeqId id) const override { return e_.is_open(id); }
  int length(runtime::SeqId id) const override { return e_.length(id); }
  runtime::StepResult step(std::span<const runtime::BatchRow> rows) override {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !held_; });
    }
    return e_.step(rows);
  }
  int64_t free_positions() const override { return e_.free_positions(); }
  int free_sequences() const override { return e_.free_sequences(); }
  const runtime::EngineInfo& info() const override { return e_.info(); }
  nlohmann::json stats() const override { return e_.stats(); }
  int64_t free_blocks() const override { return e_.free_blocks(); }
  int64_t blocks_needed(runtime::SeqId id, int n) const override { return e_.blocks_needed(id, n); }
  int attach_prefix(runtime::SeqId id, std::span<const int32_t> t) override {
    return e_.attach_prefix(id, t);
  }
  std::optional<runtime::Sampler> sampler_state(runtime::SeqId id) const override {
    return e_.sampler_state(id);
  }
  void restore_sampler(runtime::SeqId id, const runtime::Sampler& s) override { e_.restore_sampler(id, s); }

 private:
  runtime::Engine& e_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

std::string answer(Request& r) {
  std::string text;
  Request::Update u;
  while (!u.done) {
    Request::Update next;
    if (!r.wait(next, std::chrono::milliseconds(120000))) {
      ADD_FAILURE() << "no progress in 120 s";
      return text;
    }
    text += next.text;
    u = next;
  }
  EXPECT_NE(u.finish, Finish::kError) << u.error;
  return text;
}

class PagedServe : public ::testing::TestWithParam<runtime::EngineKind> {};

TEST_P(PagedServe, GreedyAnswersThroughPreemptionEqualTheAnswersAlone) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(FUTR_DEFAULT_MODEL, ec))
    GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)";
  const Model model = load_model(FUTR_DEFAULT_MODEL);
  const Tokenizer tok(model.tokenizer);
  runtime::RuntimeConfig cfg;
  cfg.engine = GetParam();  // kAuto: the GPU case
  cfg.ctx = 256;
  cfg.max_seqs = 6;
  cfg.max_step_tokens = 64;
  cfg.kv_block_size = 16;
  cfg.kv_blocks = 10;  // 160 positions; six requests of about 70 need 420
  auto inner = runtime::make_engine(model, cfg);
  if (GetParam() == runtime::EngineKind::kAuto && inner->info().name != "gpu")
    GTEST_SKIP() << "no Hopper GPU: --backend auto is the CPU engine (the cpu case)";
  ASSERT_EQ(inner->info().kv_block_size, 16);
  HeldEngine engine(*inner);
  Metrics metrics;
  SchedulerOptions so;
  so.max_step_tokens = cfg.max_step_tokens;
  so.admission_reserve = 0;  // every request admitted on its prompt's blocks: preemptions happen
  Scheduler s(engine, tok, so, &metrics);

  const std::string system = "You are a helpful assistant. Answer in one short sentence, plainly. ";
  const std::vector<std::string> qs = {"What is the capital of France?",
                                       "Name a colour of the rainbow.",
                                       "Write about the sea.",
                                       "What is 12 times 12?",
                                       "Who wrote Hamlet?",
                                       "List two planets."};
  auto params = [&](const std::string& q) {
    GenerationParams p;
    p.prompt = tok.encode(system + q, /*add_bos=*/true, /*parse_special=*/false);
    p.max_tokens = 40;
    p.sampling.temperature = 0.0f;
    return p;
  };
  std::vector<std::string> alone;
  for (const std::string& q : qs) alone.push_back(answer(*s.submit(params(q))));
  s.wait_idle();

  // All six queued at once (one submit: one lock), so the first admission
  // sees every one of them whatever the threads' timing.
  std::vector<GenerationParams> all;
  for (const std::string& q : qs) all.push_back(params(q));
  engine.hold();
  const std::vector<std::shared_ptr<Request>> rs = s.submit(std::move(all));
  engine.release();
  for (size_t i = 0; i < qs.size(); ++i)
    EXPECT_EQ(answer(*rs[i]), alone[i]) << "request " << i << ": " << qs[i];
  s.wait_idle();
  const std::string m = metrics.serialize();
  const auto value = [&](const std::string& name) {
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
  };
  EXPECT_GT(value("futr_preemptions_total"), 0) << m;
  EXPECT_GT(value("futr_prefix_cache_hit_tokens_total"), 0) << m;
  EXPECT_EQ(value("futr_kv_blocks_used"), 0) << m;
  EXPECT_EQ(inner->free_blocks(), 10);
}

INSTANTIATE_TEST_SUITE_P(Engines, PagedServe,
                         ::testing::Values(runtime::EngineKind::kCpu, runtime::EngineKind::kAuto),
                         [](const ::testing::TestParamInfo<runtime::EngineKind>& i) {
                           return std::string(i.param == runtime::EngineKind::kCpu ? "cpu" : "gpu");
                         });

}  // namespace
}  // namespace futr::server
