// Perplexity evaluation (runtime/perplexity.h): the window plan, the NLL
// statistics, the whole evaluation on a tiny random model against a direct
// computation from per-window logits, and non-finite logits refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../cpu_engine/quant_model.h"
#include "../cpu_engine/tiny_model.h"
#include "core/error.h"
#include "cpu_engine/forward.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

TEST(Perplexity, WindowsWithoutOverlap) {
  const auto w = plan_perplexity_windows(10, 4, 4);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 4);
  EXPECT_EQ(w[0].score_from, 1);  // 3 targets
  EXPECT_EQ(w[1].begin, 4);
  EXPECT_EQ(w[1].end, 8);
  EXPECT_EQ(w[1].score_from, 5);  // 3 targets; token 4 has no context in its window
  EXPECT_EQ(w[2].begin, 8);
  EXPECT_EQ(w[2].end, 10);
  EXPECT_EQ(w[2].score_from, 9);
  // Exactly a multiple of ctx, plus one token: the last window scores nothing and is dropped.
  EXPECT_EQ(plan_perplexity_windows(9, 4, 4).size(), 2u);
}

TEST(Perplexity, SlidingWindowsScoreEachTargetOnce) {
  const int64_t N = 23;
  const auto w = plan_perplexity_windows(N, 8, 3);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].score_from, 1);
  EXPECT_EQ(w[0].end, 8);
  EXPECT_EQ(w[1].begin, 3);
  EXPECT_EQ(w[1].end, 11);
  EXPECT_EQ(w[1].score_from, 8);  // the last stride = 3 tokens
  std::vector<int> scored(size_t(N), 0);
  for (const auto& x : w) {
    EXPECT_LE(x.end - x.begin, 8);
    for (int64_t t = x.score_from; t < x.end; ++t) ++scored[size_t(t)];
    if (&x != &w[0]) {
      EXPECT_GE(x.score_from - x.begin, 8 - 3);  // context >= ctx - stride
    }
  }
  EXPECT_EQ(scored[0], 0);
  for (int64_t t = 1; t < N; ++t) EXPECT_EQ(scored[size_t(t)], 1) << t;
  EXPECT_EQ(w.back().end, N);
}

TEST(Perplexity, BadPlans) {
  EXPECT_THROW(plan_perplexity_windows(100, 1, 1), Error);
  EXPECT_THROW(plan_perplexity_windows(100, 8, 9), Error);
  EXPECT_THROW(plan_perplexity_windows(100, 8, 0), Error);
  EXPECT_THROW(plan_perplexity_windows(1, 8, 8), Error);
}

TEST(Perplexity, StatsAndStandardError) {
  NllStats s;
  const std::vector<double> v = {1.0, 2.0, 4.0, 3.0};
  for (double x : v) s.add(x);
  EXPECT_EQ(s.count(), 4);
  EXPECT_DOUBLE_EQ(s.mean(), 2.5);
  const double sd = std::sqrt((2.25 + 0.25 + 2.25 + 0.25) / 3.0);
  EXPECT_NEAR(s.stderr_mean(), sd / 2.0, 1e-12);
  EXPECT_NEAR(s.ppl(), std::exp(2.5), 1e-9);
  EXPECT_NEAR(s.ppl_stderr(), std::exp(2.5) * sd / 2.0, 1e-9);
}

TEST(Perplexity, TokenNll) {
  const std::vector<float> z = {1.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(token_nll(z, 0), lse - 1.0, 1e-12);
  EXPECT_NEAR(token_nll(z, 2), lse - 3.0, 1e-12);
  EXPECT_THROW(token_nll(z, 3), Error);
  const std::vector<float> big = {1000.0f, 0.0f};  // no overflow
  EXPECT_NEAR(token_nll(big, 1), 1000.0, 1e-9);
}

// The evaluation equals NLLs computed from eval_all() logits of each window.
TEST(Perplexity, EvaluationMatchesDirectComputation) {
  const ModelConfig cfg = test::tiny_config();
  const Model m = test::random_model(cfg, 11);
  std::mt19937 rng(12);
  std::vector<int32_t> tokens(101);
  for (auto& t : tokens) t = int32_t(rng() % uint32_t(cfg.vocab));
  const int ctx = 32, stride = 12;

  NllStats direct;
  cpu::Forward f(m, ctx);
  for (const auto& w : plan_perplexity_windows(int64_t(tokens.size()), ctx, stride)) {
    f.reset();
    const Tensor l =
        f.eval_all(std::span<const int32_t>(tokens).subspan(size_t(w.begin), size_t(w.end - w.begin)));
    for (int64_t t = w.score_from; t < w.end; ++t)
      direct.add(token_nll({l.row(t - 1 - w.begin), size_t(cfg.vocab)}, tokens[size_t(t)]));
  }

  auto backend = make_engine(m, {.engine = EngineKind::kCpu, .ctx = ctx, .threads = 2});
  int calls = 0;
  const PplResult r =
      evaluate_perplexity(*backend, tokens, ctx, stride, /*batch=*/5, [&](const PplProgress& p) {
        ++calls;
        EXPECT_LE(p.scored, p.total);
      });
  EXPECT_EQ(r.stats.count(), direct.count());
  EXPECT_EQ(r.stats.count(), 100);
  EXPECT_NEAR(r.stats.mean(), direct.mean(), 1e-5);
  EXPECT_NEAR(r.stats.stderr_mean(), direct.stderr_mean(), 1e-5);
  EXPECT_GT(calls, 10);
  // A context larger than the backend's is refused.
  EXPECT_THROW(evaluate_perplexity(*backend, tokens, ctx * 2, stride, 5), Error);
}

// NaN or Inf logits make the evaluation fail naming the token, on the
// log-probability path and on the logits-hook path, instead of reporting
// perplexity = nan with exit status 0; sequences it opened are closed.
TEST(Perplexity, NonFiniteLogitsAreAnError) {
  const ModelConfig cfg = test::tiny_config();
  for (const float bad : {NAN, INFINITY}) {
    Model m = test::random_model(cfg, 11);
    const int64_t H = cfg.hidden;
    for (int64_t k = 0; k < H; ++k) m.weights.lm_head.data[size_t(40 * H + k)] = bad;  // id 40's logit
    std::vector<int32_t> tokens(30);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i % 20);  // 40 never a target
    auto e = make_engine(m, {.engine = EngineKind::kCpu, .ctx = 16, .max_seqs = 2, .threads = 2});
    EXPECT_FUTR_ERROR(evaluate_perplexity(*e, tokens, 16, 8, 4),
                      "perplexity: token 1 of the text has a non-finite log-probability");
    EXPECT_EQ(e->free_sequences(), 2);
    const PplLogitsHook hook = [](const Tensor&, int, const int32_t*) {};
    EXPECT_FUTR_ERROR(evaluate_perplexity(*e, tokens, 16, 8, 4, {}, hook),
                      "the model's logits hold NaN or Inf");
    EXPECT_EQ(e->free_sequences(), 2);
  }
}

// Several windows side by side (max_seqs > 1, one piece of each per step) give
// the statistics of one window at a time bit for bit, on the FP32 and on a
// quantized engine; a logits hook sees every scored row in scoring order.
TEST(Perplexity, SideBySideWindowsEqualOneAtATime) {
  const Model m = test::random_model(test::quant_config(), 5);
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(151);
  for (auto& t : tokens) t = int32_t(rng() % uint32_t(m.config.vocab));
  const int ctx = 24, stride = 10, batch = 7;
  for (const auto& [w, kv] : {std::pair{WeightFormat::kFp32, KvFormat::kFp32},
                              std::pair{WeightFormat::kInt4, KvFormat::kInt4Rot}}) {
    RuntimeConfig c{.engine = EngineKind::kCpu, .weights = w, .kv = kv, .ctx = ctx, .threads = 2};
    c.max_step_tokens = batch;
    auto one = make_engine(m, c);
    c.max_seqs = 4;
    c.max_step_tokens = 4 * batch;
    auto four = make_engine(m, c);
    int steps1 = 0, steps4 = 0;
    const PplResult r1 =
        evaluate_perplexity(*one, tokens, ctx, stride, batch, [&](const PplProgress&) { ++steps1; });
    const PplResult r4 =
        evaluate_perplexity(*four, tokens, ctx, stride, batch, [&](const PplProgress&) { ++steps4; });
    EXPECT_EQ(r4.stats.count(), r1.stats.count());
    EXPECT_EQ(r4.stats.mean(), r1.stats.mean()) << to_string(w);  // bit for bit
    EXPECT_EQ(r4.stats.stderr_mean(), r1.stats.stderr_mean());
    EXPECT_EQ(r4.evaluated, r1.evaluated);
    EXPECT_LT(steps4, steps1);             // windows did share steps
    EXPECT_EQ(four->free_sequences(), 4);  // every window's sequence closed
    // With a logits hook: the rows in scoring order, their NLLs the same.
    NllStats from_hook;
    int64_t rows_seen = 0;
    const PplResult rh = evaluate_perplexity(
        *four, tokens, ctx, stride, batch, {}, [&](const Tensor& logits, int rows, const int32_t* targets) {
          for (int i = 0; i < rows; ++i)
            from_hook.add(token_nll({logits.row(i), size_t(logits.dim(1))}, targets[i]));
          rows_seen += rows;
        });
    EXPECT_EQ(rows_seen, r1.stats.count());
    EXPECT_EQ(rh.stats.mean(), r1.stats.mean());
    EXPECT_EQ(from_hook.mean(), r1.stats.mean());
  }
}

TEST(Engine, KindsOfTheFactory) {
  const Model m = test::random_model(test::tiny_config(), 1);
  EXPECT_THROW(parse_engine_kind("tpu"), Error);
  EXPECT_THROW(make_engine(m, {.engine = EngineKind::kGpu, .ctx = 16}), Error);
  std::string said;
  EXPECT_EQ(make_engine(m, {.engine = EngineKind::kAuto, .ctx = 16}, [&](const std::string& s) { said += s; })
                ->info()
                .name,
            "cpu");
  EXPECT_EQ(said.rfind("engine cpu (", 0), 0u) << said;
}

// engine_for() names the engine make_engine() builds: the one asked for, and
// for auto the one make_engine picks (the CPU engine for formats the GPU
// engine does not run, whatever the machine).
TEST(Engine, EngineForNamesWhatTheFactoryBuilds) {
  const Model m = test::random_model(test::tiny_config(), 1);
  RuntimeConfig c;
  c.ctx = 16;
  c.engine = EngineKind::kCpu;
  EXPECT_EQ(engine_for(c), EngineKind::kCpu);
  c.engine = EngineKind::kGpu;
  EXPECT_EQ(engine_for(c), EngineKind::kGpu);
  c.engine = EngineKind::kAuto;
  const std::string built = make_engine(m, c)->info().name;
  EXPECT_EQ(engine_for(c), built == "cpu" ? EngineKind::kCpu : EngineKind::kGpu) << built;
  c.kv = KvFormat::kFp32;
  EXPECT_EQ(engine_for(c), EngineKind::kCpu);
  c.kv = KvFormat::kAuto;
  c.weights = WeightFormat::kFp32;
  EXPECT_EQ(engine_for(c), EngineKind::kCpu);
}

}  // namespace
}  // namespace futr::runtime
