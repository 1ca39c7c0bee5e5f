// The scheduler over an engine that pages (src/server/scheduler.h, "Preemption";
// tests/server/fake_engine.h with Options::block_size: the real
// runtime::BlockPool's accounting and prefix index): 200 requests with
// shared prefixes and random lengths through a cache too small for all of
// them at once (preemptions happen, every answer equals the one an idle
// server gives, every block is free at the end), requests as large as the
// whole cache finishing one after another, and multi-turn prompts attaching
// the conversation's cached blocks (and not with prefix_cache off).
// Not timing-dependent: the engine holds its first step until every request
// is queued (FakeEngine::Options::held), and nothing is submitted after.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

#include "server/fake_engine.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/server_test_util.h"

namespace futr::server {
namespace {

using test::collect;
using test::Outcome;
using test::reference_tokens;

using std::chrono::milliseconds;

// The Prometheus value of a metric without labels ("name value" line).
double metric(const Metrics& m, const std::string& name) {
  const std::string text = m.serialize();
  const size_t at = text.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name << " not in\n" << text;
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
}

class PagedSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = test::default_tokenizer();
    if (!tok_) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)";
    words_ = test::word_tokens(*tok_);
    ASSERT_GE(words_.size(), 8u);
  }
  test::FakeEngine::Options engine_options(int block_size, int64_t blocks) {
    test::FakeEngine::Options o = test::fake_engine_options(*tok_, words_);
    o.block_size = block_size;
    o.blocks = blocks;
    return o;
  }
  std::vector<int32_t> random_words(std::mt19937& rng, int n) { return test::random_words(rng, words_, n); }
  const Tokenizer* tok_ = nullptr;
  std::vector<int32_t> words_;
};

// With the admission reserve off (every request admitted on its prompt's
// blocks: the most preemptions) and at its default (fewer admitted while
// others run): the same answers, preemptions in both, fewer with the reserve.
TEST_F(PagedSchedulerTest, TwoHundredRequestsThroughATooSmallCacheGetTheIdleAnswers) {
  std::map<double, double> preemptions;
  for (double reserve : {0.0, SchedulerOptions{}.admission_reserve}) {
    SCOPED_TRACE(reserve);
    auto eo = engine_options(/*block_size=*/8, /*blocks=*/40);  // 320 positions for up to 8 x 100
    eo.ctx = 128;
    eo.max_seqs = 8;
    eo.max_step_tokens = 24;
    eo.eos_every = 60;  // some requests end early with EOS
    eo.held = true;
    test::FakeEngine engine(eo);
    ASSERT_EQ(engine.info().kv_block_size, 8);
    Metrics metrics;
    SchedulerOptions so;
    so.max_queue = 256;
    so.admission_reserve = reserve;
    Scheduler s(engine, *tok_, so, &metrics);
    EXPECT_EQ(s.max_request_positions(), 128);

    std::mt19937 rng(2024);
    // Shared prefixes: three system prompts; some requests continue an earlier
    // one's prompt (a later turn of the same conversation).
    const std::vector<std::vector<int32_t>> systems = {random_words(rng, 16), random_words(rng, 21),
                                                       random_words(rng, 5)};
    std::vector<GenerationParams> ps;
    std::vector<std::shared_ptr<Request>> rs;
    for (int i = 0; i < 200; ++i) {
      GenerationParams p;
      if (i >= 10 && rng() % 4 == 0) {
        p.prompt = ps[rng() % ps.size()].prompt;        // a later turn
        if (p.prompt.size() > 60) p.prompt.resize(40);  // prompt + max_tokens within the context
      } else {
        p.prompt = systems[rng() % systems.size()];
      }
      const auto user = random_words(rng, 1 + int(rng() % 20));
      p.prompt.insert(p.prompt.end(), user.begin(), user.end());
      p.max_tokens = 1 + int(rng() % 40);
      p.sampling.seed = rng();
      if (i % 7 == 0) p.sampling.repetition_penalty = 1.001f;  // drawn by the scheduler's sampler
      ps.push_back(p);
      rs.push_back(s.submit(p));
    }
    engine.release();
    for (size_t i = 0; i < rs.size(); ++i) {
      expect_reference_outcome(collect(*rs[i]), engine, ps[i], *tok_, "request " + std::to_string(i));
    }
    s.wait_idle();
    EXPECT_GT(metric(metrics, "futr_prefix_cache_hit_tokens_total"), 0);
    EXPECT_GT(metric(metrics, "futr_prefix_cache_hit_rate"), 0);
    EXPECT_EQ(metric(metrics, "futr_kv_blocks_used"), 0);
    EXPECT_EQ(metric(metrics, "futr_kv_blocks_free"), 40);
    EXPECT_EQ(engine.open_now(), 0);
    EXPECT_EQ(engine.pool()->used_blocks(), 0);
    EXPECT_EQ(engine.pool()->free_blocks(), 40);
    EXPECT_EQ(s.preempted(), 0);
    EXPECT_GT(engine.max_seqs_in_step(), 1);
    preemptions[reserve] = metric(metrics, "futr_preemptions_total");
  }
  std::printf("preemptions: %.0f without the admission reserve, %.0f with it\n", preemptions[0.0],
              preemptions[SchedulerOptions{}.admission_reserve]);
  EXPECT_LT(preemptions[SchedulerOptions{}.admission_reserve], preemptions[0.0]);
}

// Requests each as large as the whole cache: they run one at a time (the
// newest gives its blocks back to the oldest), none fails or stalls.
TEST_F(PagedSchedulerTest, RequestsAsLargeAsTheCacheFinishOneAfterAnother) {
  auto eo = engine_options(4, 8);  // 32 positions in all
  eo.ctx = 64;
  eo.max_seqs = 4;
  eo.max_step_tokens = 6;
  eo.held = true;
  test::FakeEngine engine(eo);
  Metrics metrics;
  Scheduler s(engine, *tok_, {}, &metrics);
  EXPECT_EQ(s.max_request_positions(), 32);
  std::mt19937 rng(7);
  std::vector<GenerationParams> ps;
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < 10; ++i) {
    GenerationParams p;
    p.prompt = random_words(rng, 10 + i);
    p.max_tokens = 32 - int(p.prompt.size());
    p.sampling.seed = uint64_t(i);
    ps.push_back(p);
    rs.push_back(s.submit(p));
  }
  engine.release();
  for (size_t i = 0; i < rs.size(); ++i) {
    const Outcome o = collect(*rs[i]);
    EXPECT_EQ(o.text, tok_->decode(reference_tokens(engine, ps[i], -1))) << "request " << i;
    EXPECT_EQ(o.finish, Finish::kLength);
  }
  s.wait_idle();
  EXPECT_GT(metric(metrics, "futr_preemptions_total"), 0);
  EXPECT_EQ(engine.pool()->used_blocks(), 0);
}

// A chat's later turn attaches the blocks the earlier turn left: its prompt
// (and the answer's tokens but the last, which was never fed) in full blocks.
TEST_F(PagedSchedulerTest, ALaterTurnReusesTheConversationsBlocks) {
  for (bool prefix_cache : {true, false}) {
    auto eo = engine_options(4, 64);
    test::FakeEngine engine(eo);
    Metrics metrics;
    SchedulerOptions so;
    so.prefix_cache = prefix_cache;
    Scheduler s(engine, *tok_, so, &metrics);
    std::mt19937 rng(11);
    GenerationParams turn1;
    turn1.prompt = random_words(rng, 14);
    turn1.max_tokens = 9;
    const auto answer = reference_tokens(engine, turn1, -1);
    collect(*s.submit(turn1));
    s.wait_idle();
    GenerationParams turn2 = turn1;
    turn2.prompt.insert(turn2.prompt.end(), answer.begin(), answer.end());
    const auto user = random_words(rng, 6);
    turn2.prompt.insert(turn2.prompt.end(), user.begin(), user.end());
    const Outcome o = collect(*s.submit(turn2));
    EXPECT_EQ(o.text, tok_->decode(reference_tokens(engine, turn2, -1)));
    s.wait_idle();
    // Turn 1 stored 14 + 8 positions: 5 full blocks of 4 (20 positions).
    EXPECT_EQ(engine.attached(), prefix_cache ? 20 : 0) << "prefix cache " << prefix_cache;
    EXPECT_EQ(metric(metrics, "futr_prefix_cache_hit_tokens_total"), prefix_cache ? 20 : 0);
    EXPECT_EQ(metric(metrics, "futr_prefix_cache_query_tokens_total"), 14 + int(turn2.prompt.size()));
    EXPECT_EQ(engine.pool()->used_blocks(), 0);
  }
}

// The n choices of a call compute their prompt once: the later choices wait
// for the first to compute it and attach its full blocks; each choice gets the
// tokens it gets alone (its own seed).
TEST_F(PagedSchedulerTest, TheChoicesOfACallShareThePromptsBlocks) {
  for (bool prefix_cache : {true, false}) {
    auto eo = engine_options(4, 64);
    test::FakeEngine engine(eo);
    Metrics metrics;
    SchedulerOptions so;
    so.prefix_cache = prefix_cache;
    Scheduler s(engine, *tok_, so, &metrics);
    std::mt19937 rng(5);
    GenerationParams p;
    p.prompt = random_words(rng, 23);
    p.max_tokens = 6;
    p.sampling.temperature = 0.8f;
    std::vector<GenerationParams> choices;
    for (uint64_t i = 0; i < 4; ++i) {
      choices.push_back(p);
      choices.back().sampling.seed = 100 + i;
    }
    const auto rs = s.submit(choices);
    for (size_t i = 0; i < rs.size(); ++i) {
      const Outcome o = collect(*rs[i]);
      EXPECT_EQ(o.text, tok_->decode(reference_tokens(engine, choices[i], -1))) << "choice " << i;
    }
    s.wait_idle();
    // The prompt's 22 rows before its last: 5 full blocks of 4, attached by the three later choices.
    EXPECT_EQ(engine.attached(), prefix_cache ? 3 * 20 : 0) << "prefix cache " << prefix_cache;
    EXPECT_EQ(engine.pool()->used_blocks(), 0);
  }
}

// Log-probabilities through preemption: requests that score their prompt
// (echo), ask for their tokens' logprobs with alternatives, or only score
// (max_tokens 0), through a cache too small for all at once, get exactly the
// values the same requests get one at a time from an idle server.
TEST_F(PagedSchedulerTest, LogprobsAndPromptScoresThroughPreemptionEqualAnIdleServers) {
  struct Scores {
    std::string text;
    std::vector<TokenLogprob> generated, prompt;
  };
  auto collect_scores = [](Request& r) {
    Scores out;
    Request::Update u;
    while (!u.done) {
      Request::Update next;
      if (!r.wait(next, milliseconds(20000))) {
        ADD_FAILURE() << "no progress in 20 s";
        return out;
      }
      out.text += next.text;
      out.generated.insert(out.generated.end(), next.logprobs.begin(), next.logprobs.end());
      out.prompt.insert(out.prompt.end(), next.prompt_logprobs.begin(), next.prompt_logprobs.end());
      u = next;
    }
    return out;
  };
  auto same = [](const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b,
                 const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].token, b[i].token) << what << " " << i;
      EXPECT_EQ(a[i].has_logprob, b[i].has_logprob) << what << " " << i;
      if (a[i].has_logprob) {
        EXPECT_EQ(a[i].logprob, b[i].logprob) << what << " " << i;  // the same bits
      }
      ASSERT_EQ(a[i].top.size(), b[i].top.size()) << what << " " << i;
      for (size_t k = 0; k < a[i].top.size(); ++k) {
        EXPECT_EQ(a[i].top[k].token, b[i].top[k].token) << what << " " << i;
        EXPECT_EQ(a[i].top[k].logprob, b[i].top[k].logprob) << what << " " << i;
      }
    }
  };
  std::mt19937 rng(77);
  const auto system = random_words(rng, 19);
  std::vector<GenerationParams> ps;
  for (int i = 0; i < 60; ++i) {
    GenerationParams p;
    p.prompt = system;
    const auto user = random_words(rng, 1 + int(rng() % 24));
    p.prompt.insert(p.prompt.end(), user.begin(), user.end());
    p.sampling.seed = rng();
    switch (i % 4) {
      case 0: p.prompt_logprobs = 0, p.max_tokens = 0; break;  // scores only
      case 1: p.prompt_logprobs = 2, p.logprobs = 2, p.max_tokens = 1 + int(rng() % 30); break;
      case 2: p.logprobs = 0, p.max_tokens = 1 + int(rng() % 30); break;
      default: p.max_tokens = 1 + int(rng() % 30); break;
    }
    ps.push_back(p);
  }
  // The idle server: one request at a time, a cache for all of it.
  std::vector<Scores> alone;
  {
    auto eo = engine_options(/*block_size=*/8, /*blocks=*/64);
    eo.ctx = 128;
    eo.max_seqs = 8;
    eo.max_step_tokens = 24;
    eo.eos_every = 60;
    test::FakeEngine engine(eo);
    Scheduler s(engine, *tok_, {});
    for (const auto& p : ps) alone.push_back(collect_scores(*s.submit(p)));
  }
  auto eo = engine_options(/*block_size=*/8, /*blocks=*/24);
  eo.ctx = 128;
  eo.max_seqs = 8;
  eo.max_step_tokens = 24;
  eo.eos_every = 60;
  eo.held = true;
  test::FakeEngine engine(eo);
  Metrics metrics;
  SchedulerOptions so;
  so.max_queue = 128;
  Scheduler s(engine, *tok_, so, &metrics);
  std::vector<std::shared_ptr<Request>> rs;
  for (const auto& p : ps) rs.push_back(s.submit(p));
  engine.release();
  for (size_t i = 0; i < rs.size(); ++i) {
    const Scores got = collect_scores(*rs[i]);
    EXPECT_EQ(got.text, alone[i].text) << "request " << i;
    same(got.generated, alone[i].generated, "generated logprobs of request " + std::to_string(i));
    same(got.prompt, alone[i].prompt, "prompt logprobs of request " + std::to_string(i));
    if (ps[i].prompt_logprobs >= 0) {
      EXPECT_EQ(got.prompt.size(), ps[i].prompt.size()) << "request " << i;
    }
  }
  s.wait_idle();
  EXPECT_GT(metric(metrics, "futr_preemptions_total"), 0);
  EXPECT_EQ(engine.pool()->used_blocks(), 0);
  EXPECT_EQ(engine.open_now(), 0);
}

}  // namespace
}  // namespace futr::server
