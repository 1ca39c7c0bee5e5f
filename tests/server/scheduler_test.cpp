// The continuous-batching scheduler (src/server/scheduler.h) over the fake
// engine (fake_engine.h, which checks the Engine contract on every step):
// exact tokens alone and together, chunked prefill mixed with decode,
// admission (never fits, must wait), the queue bound, EOS and stop strings,
// cancellation, drain.
#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>

#include "runtime/perplexity.h"
#include "server/fake_engine.h"
#include "server/metrics.h"
#include "server/server_test_util.h"
#include "support/expect_error.h"

namespace futr::server {
namespace {

using test::collect;
using test::Outcome;
using test::reference_tokens;

using std::chrono::milliseconds;

GenerationParams params(std::vector<int32_t> prompt, int max_tokens, uint64_t seed) {
  GenerationParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.seed = seed;
  return p;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = test::default_tokenizer();
    if (!tok_) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)";
    words_ = test::word_tokens(*tok_);
    ASSERT_GE(words_.size(), 8u);
  }
  test::FakeEngine::Options engine_options() { return test::fake_engine_options(*tok_, words_); }
  std::vector<int32_t> random_prompt(std::mt19937& rng, int n) { return test::random_words(rng, words_, n); }
  const Tokenizer* tok_ = nullptr;
  std::vector<int32_t> words_;
};

TEST_F(SchedulerTest, OneRequestGetsTheReferenceTokens) {
  test::FakeEngine engine(engine_options());
  Scheduler s(engine, *tok_, {});
  const auto p = params({words_[0], words_[1], words_[2]}, 20, 7);
  const Outcome o = collect(*s.submit(p));
  EXPECT_EQ(o.finish, Finish::kLength);
  EXPECT_EQ(o.completion_tokens, 20);
  EXPECT_EQ(o.text, tok_->decode(reference_tokens(engine, p, tok_->eos())));
  s.wait_idle();
  EXPECT_EQ(engine.open_now(), 0);  // the sequence was closed
}

// Many requests at once, more than max_seqs, prompts longer than a step:
// each gets exactly its own tokens; steps batch several sequences and mix
// prompt chunks with decode rows; every sequence is closed at the end.
TEST_F(SchedulerTest, ConcurrentRequestsGetExactlyTheirOwnTokens) {
  auto eo = engine_options();
  eo.max_seqs = 4;
  eo.max_step_tokens = 16;
  eo.eos_every = 40;  // some requests end early with EOS
  eo.held = true;     // all twelve are queued before the first step runs
  test::FakeEngine engine(eo);
  Metrics metrics;
  Scheduler s(engine, *tok_, {}, &metrics);
  std::mt19937 rng(std::random_device{}());
  std::vector<GenerationParams> ps;
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < 12; ++i) {
    ps.push_back(params(random_prompt(rng, 1 + int(rng() % 40)), 1 + int(rng() % 30), rng()));
    rs.push_back(s.submit(ps.back()));
  }
  engine.release();
  for (size_t i = 0; i < rs.size(); ++i) {
    expect_reference_outcome(collect(*rs[i]), engine, ps[i], *tok_, "request " + std::to_string(i));
  }
  s.wait_idle();
  EXPECT_EQ(engine.open_now(), 0);
  EXPECT_EQ(engine.opened(), 12);
  EXPECT_EQ(engine.closed(), 12);
  EXPECT_GT(engine.max_seqs_in_step(), 1);  // batched
  EXPECT_LE(engine.max_rows(), 16);         // within max_step_tokens
  const std::string m = metrics.serialize();
  EXPECT_NE(m.find("futr_requests_running 0"), std::string::npos) << m;
  EXPECT_NE(m.find("futr_kv_positions_used 0"), std::string::npos) << m;
}

// A long prompt arriving while another request decodes is prefilled in
// chunks, and the decoding request gets a token in every one of those steps.
TEST_F(SchedulerTest, LongPromptIsChunkedBesideDecodeRows) {
  auto eo = engine_options();
  eo.max_step_tokens = 8;
  eo.step_time = std::chrono::microseconds(2000);
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  std::mt19937 rng(1);
  auto a = s.submit(params(random_prompt(rng, 3), 60, 1));
  Request::Update u;
  ASSERT_TRUE(a->wait(u, milliseconds(5000)));  // a is decoding
  const int before = engine.steps();
  const auto pb = params(random_prompt(rng, 70), 2, 2);  // 70 rows: >= 10 steps of 7
  auto b = s.submit(pb);
  const Outcome ob = collect(*b);
  const int steps_b = engine.steps() - before;
  EXPECT_EQ(ob.text, tok_->decode(reference_tokens(engine, pb, -1)));
  Request::Update ua;
  ASSERT_TRUE(a->wait(ua, milliseconds(5000)));
  // a decoded during b's prefill: at least one token per step b took.
  EXPECT_GE(ua.completion_tokens, steps_b - 1) << "steps during b: " << steps_b;
  EXPECT_GE(steps_b, 10);
  a->cancel();
  collect(*a);
}

// Requests with penalties: the scheduler asks for logits and draws with a
// sampler that has seen the prompt and the tokens so far. A repetition
// penalty too small to move an argmax gives the engine's own tokens (the
// logits rows reach their requests, beside other requests' kToken rows in
// the same steps); a presence penalty of 2 makes greedy decoding avoid every
// word it has already produced, exactly as the sampler's rule says.
TEST_F(SchedulerTest, PenaltiesDrawFromTheSequencesHistory) {
  auto eo = engine_options();
  eo.max_seqs = 4;
  eo.max_step_tokens = 16;
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  std::mt19937 rng(3);
  const int n = int(words_.size());
  std::vector<GenerationParams> ps;
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < 6; ++i) {
    ps.push_back(params(random_prompt(rng, 1 + int(rng() % 20)), n, rng()));
    if (i % 2 == 0) ps.back().sampling.repetition_penalty = 1.001f;  // 1 -> 0.999, still above the 0s
    rs.push_back(s.submit(ps.back()));
  }
  auto pp = params(random_prompt(rng, 5), n, 11);
  pp.sampling.presence_penalty = 2.0f;
  auto rp = s.submit(pp);
  for (size_t i = 0; i < rs.size(); ++i)
    EXPECT_EQ(collect(*rs[i]).text, tok_->decode(reference_tokens(engine, ps[i], -1))) << "request " << i;

  // Greedy with the presence penalty, by the sampler's definition: z -= 2
  // for every id generated so far, argmax (lowest id among ties).
  std::vector<int32_t> history = pp.prompt, want;
  while (int(want.size()) < n) {
    const std::vector<float> z = engine.logits_for(engine.draw_for(pp.sampling.seed, history));
    int32_t best = 0;
    float best_z = -INFINITY;
    for (int32_t id = 0; id < int32_t(z.size()); ++id) {
      const bool seen = std::find(want.begin(), want.end(), id) != want.end();
      const float zi = z[size_t(id)] - (seen ? 2.0f : 0.0f);
      if (zi > best_z) best = id, best_z = zi;
    }
    want.push_back(best);
    history.push_back(best);
  }
  EXPECT_EQ(std::set<int32_t>(want.begin(), want.end()).size(), want.size());  // no word twice
  const auto plain = reference_tokens(engine, pp, -1);
  ASSERT_LT(std::set<int32_t>(plain.begin(), plain.end()).size(), plain.size()) << "no repeat to avoid";
  const Outcome o = collect(*rp);
  EXPECT_EQ(o.text, tok_->decode(want));
  EXPECT_EQ(o.finish, Finish::kLength);
  s.wait_idle();
  EXPECT_EQ(engine.open_now(), 0);
}

// log softmax of the fake engine's logits row after `history` at `token`.
double fake_logprob(const test::FakeEngine& e, uint64_t seed, std::span<const int32_t> history,
                    int32_t token) {
  return -runtime::token_nll(e.logits_for(e.draw_for(seed, history)), token);
}

// Requests asking for logprobs draw on the host from kLogits rows, beside
// plain requests in the same steps: every request gets the engine's tokens,
// and each generated token's entry is log softmax of its row exactly, with
// the k most likely ids (the drawn word at 1, then the other words at 0,
// lower ids first).
TEST_F(SchedulerTest, LogprobsOfGeneratedTokensAreExact) {
  auto eo = engine_options();
  eo.max_step_tokens = 8;
  eo.held = true;  // all four are queued before the first step
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  std::mt19937 rng(std::random_device{}());
  std::vector<GenerationParams> ps;
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < 4; ++i) {
    ps.push_back(params(random_prompt(rng, 1 + int(rng() % 12)), 10 + int(rng() % 10), rng()));
    ps.back().logprobs = i % 2 == 0 ? 3 : -1;
    rs.push_back(s.submit(ps.back()));
  }
  engine.release();
  std::vector<int32_t> sorted_words = words_;
  std::sort(sorted_words.begin(), sorted_words.end());
  for (size_t i = 0; i < rs.size(); ++i) {
    const GenerationParams& p = ps[i];
    const Outcome o = collect(*rs[i]);
    const auto ref = reference_tokens(engine, p, -1);
    EXPECT_EQ(o.text, tok_->decode(ref)) << "request " << i;
    if (p.logprobs < 0) {
      EXPECT_TRUE(o.logprobs.empty());
      continue;
    }
    ASSERT_EQ(o.logprobs.size(), ref.size()) << "request " << i;
    std::vector<int32_t> history = p.prompt;
    for (size_t j = 0; j < ref.size(); ++j) {
      const TokenLogprob& e = o.logprobs[j];
      EXPECT_EQ(e.token, ref[j]);
      EXPECT_TRUE(e.has_logprob);
      EXPECT_EQ(e.logprob, fake_logprob(engine, p.sampling.seed, history, ref[j])) << "token " << j;
      ASSERT_EQ(e.top.size(), 3u);
      std::vector<int32_t> want = {ref[j]};
      for (int32_t w : sorted_words)
        if (w != ref[j] && want.size() < 3) want.push_back(w);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(e.top[k].token, want[k]) << "token " << j << " top " << k;
        EXPECT_EQ(e.top[k].logprob, fake_logprob(engine, p.sampling.seed, history, want[k]));
      }
      history.push_back(ref[j]);
    }
  }
  EXPECT_GT(engine.rows_with(runtime::RowOutput::kLogits), 0);
  EXPECT_GT(engine.rows_with(runtime::RowOutput::kToken), 0);
  s.wait_idle();
  EXPECT_EQ(engine.open_now(), 0);
}

// Echo's prompt scores: each prompt token from the second on gets log p(it |
// the tokens before it), from kLogprob rows (k = 0) or kLogits rows (k > 0,
// with the alternatives), the same values either way, over prompt chunks of
// several steps within max_step_tokens; they reach the request before its
// first token. max_tokens 0 only scores the prompt and ends "length".
TEST_F(SchedulerTest, PromptLogprobsScoreEachNextPromptToken) {
  auto eo = engine_options();
  eo.max_step_tokens = 8;
  std::mt19937 rng(std::random_device{}());
  const std::vector<int32_t> prompt = random_prompt(rng, 30);
  const uint64_t seed = rng();
  for (const int k : {0, 2}) {
    for (const int max_tokens : {0, 5}) {
      test::FakeEngine engine(eo);
      Scheduler s(engine, *tok_, {});
      auto p = params(prompt, max_tokens, seed);
      p.prompt_logprobs = k;
      const Outcome o = collect(*s.submit(p));
      SCOPED_TRACE(fmt::format("k {} max_tokens {}", k, max_tokens));
      EXPECT_EQ(o.finish, Finish::kLength);
      EXPECT_EQ(o.completion_tokens, max_tokens);
      EXPECT_EQ(o.text, tok_->decode(reference_tokens(engine, p, -1)));
      EXPECT_TRUE(o.prompt_logprobs_first);
      ASSERT_EQ(o.prompt_logprobs.size(), prompt.size());
      EXPECT_EQ(o.prompt_logprobs[0].token, prompt[0]);
      EXPECT_FALSE(o.prompt_logprobs[0].has_logprob);
      for (size_t i = 1; i < prompt.size(); ++i) {
        const TokenLogprob& e = o.prompt_logprobs[i];
        EXPECT_EQ(e.token, prompt[i]);
        EXPECT_TRUE(e.has_logprob);
        EXPECT_EQ(e.logprob, fake_logprob(engine, seed, std::span(prompt).first(i), prompt[i]))
            << "token " << i;
        EXPECT_EQ(e.top.size(), size_t(k));
      }
      EXPECT_EQ(engine.rows_with(k == 0 ? runtime::RowOutput::kLogprob : runtime::RowOutput::kLogits),
                int64_t(prompt.size()) - 1);
      EXPECT_LE(engine.max_rows(), 8);
      s.wait_idle();
      EXPECT_EQ(engine.open_now(), 0);
    }
  }
  // A one-token prompt: its one entry, without a logprob.
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  auto p = params({words_[0]}, 0, 1);
  p.prompt_logprobs = 1;
  const Outcome o = collect(*s.submit(p));
  ASSERT_EQ(o.prompt_logprobs.size(), 1u);
  EXPECT_FALSE(o.prompt_logprobs[0].has_logprob);
  EXPECT_EQ(o.finish, Finish::kLength);
}

// The n choices of a call: queued together, each its own sequence with its
// own seed, one signal for all; a group the queue has no room for is
// refused whole.
TEST_F(SchedulerTest, ChoicesOfOneCallAreQueuedTogether) {
  auto eo = engine_options();
  eo.max_seqs = 2;
  eo.held = true;
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {.max_queue = 5});
  std::vector<GenerationParams> ps;
  for (uint64_t i = 0; i < 5; ++i) ps.push_back(params({words_[1], words_[2]}, 12, 100 + i));
  const auto rs = s.submit(ps);
  ASSERT_EQ(rs.size(), 5u);
  const uint64_t v0 = rs[0]->signal()->version();
  try {
    s.submit(std::vector<GenerationParams>(6, ps[0]));
    ADD_FAILURE() << "no AdmissionError";
  } catch (const AdmissionError& e) {
    EXPECT_EQ(e.status(), 429);
  }
  engine.release();
  std::set<std::string> texts;
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i]->signal(), rs[0]->signal());
    const Outcome o = collect(*rs[i]);
    EXPECT_EQ(o.text, tok_->decode(reference_tokens(engine, ps[i], -1))) << "choice " << i;
    texts.insert(o.text);
  }
  EXPECT_GT(texts.size(), 1u);  // the seeds differ
  EXPECT_GT(rs[0]->signal()->version(), v0);
  s.wait_idle();
  EXPECT_EQ(engine.opened(), 5);  // the refused group opened nothing
  EXPECT_EQ(engine.open_now(), 0);
}

TEST_F(SchedulerTest, RequestThatCanNeverFitIsRefused) {
  auto eo = engine_options();
  eo.ctx = 50;
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  EXPECT_EQ(s.max_request_positions(), 50);
  try {
    s.submit(params(std::vector<int32_t>(40, words_[0]), 11, 0));
    ADD_FAILURE() << "no AdmissionError";
  } catch (const AdmissionError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("maximum context length is 50"), std::string::npos) << e.what();
  }
  EXPECT_EQ(collect(*s.submit(params(std::vector<int32_t>(40, words_[0]), 10, 0))).finish,
            Finish::kLength);  // exactly 50 fits
  EXPECT_FUTR_ERROR(s.submit(params({}, 5, 0)), "empty");
  EXPECT_FUTR_ERROR(s.submit(params({words_[0]}, 0, 0)), "max_tokens");
  EXPECT_FUTR_ERROR(s.submit(params({tok_->vocab_size()}, 5, 0)), "vocabulary");
}

// Positions for one request at a time: the second waits until the first
// has finished, then runs; both give their reference text.
TEST_F(SchedulerTest, RequestThatMustWaitWaits) {
  auto eo = engine_options();
  eo.ctx = 100;
  eo.positions = 100;
  eo.max_seqs = 4;
  eo.step_time = std::chrono::microseconds(500);
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  const auto pa = params(std::vector<int32_t>(30, words_[1]), 50, 1);
  const auto pb = params(std::vector<int32_t>(30, words_[2]), 50, 2);
  auto a = s.submit(pa);
  auto b = s.submit(pb);
  const Outcome oa = collect(*a);
  const Outcome ob = collect(*b);
  EXPECT_EQ(oa.text, tok_->decode(reference_tokens(engine, pa, -1)));
  EXPECT_EQ(ob.text, tok_->decode(reference_tokens(engine, pb, -1)));
  EXPECT_EQ(engine.max_seqs_in_step(), 1);  // never together: 160 > 100 positions
}

TEST_F(SchedulerTest, FullQueueIsRefusedWith429) {
  auto eo = engine_options();
  eo.max_seqs = 1;
  eo.step_time = std::chrono::microseconds(1000);
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {.max_queue = 1});
  auto a = s.submit(params({words_[0]}, 200, 1));
  while (s.running() == 0) std::this_thread::sleep_for(milliseconds(1));
  auto b = s.submit(params({words_[0]}, 5, 2));  // waits (one slot, taken)
  try {
    s.submit(params({words_[0]}, 5, 3));
    ADD_FAILURE() << "no AdmissionError";
  } catch (const AdmissionError& e) {
    EXPECT_EQ(e.status(), 429);
  }
  a->cancel();
  EXPECT_EQ(collect(*a).finish, Finish::kCancelled);
  EXPECT_EQ(collect(*b).finish, Finish::kLength);
}

TEST_F(SchedulerTest, EosAndStopStringsEndWithStop) {
  test::FakeEngine engine(engine_options());
  Scheduler s(engine, *tok_, {});
  auto p = params({words_[3], words_[4]}, 30, 11);
  const auto ref = reference_tokens(engine, p, -1);
  // A stop string = the text of tokens 5..6: the output is the text before it.
  const std::vector<int32_t> head(ref.begin(), ref.begin() + 5);
  const std::vector<int32_t> stop(ref.begin() + 5, ref.begin() + 7);
  p.stop = {tok_->decode(stop)};
  const std::string before = tok_->decode(head);
  const Outcome o = collect(*s.submit(p));
  EXPECT_EQ(o.finish, Finish::kStop);
  const size_t first = (tok_->decode(ref)).find(p.stop[0]);  // it may occur earlier
  EXPECT_EQ(o.text, tok_->decode(ref).substr(0, first));
  EXPECT_LE(o.text.size(), before.size());
  // EOS: the fake engine draws it every ~5 tokens; its text is not returned.
  auto eo = engine_options();
  eo.eos_every = 5;
  test::FakeEngine eos_engine(eo);
  Scheduler s2(eos_engine, *tok_, {});
  int stops = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto q = params({words_[0]}, 50, seed);
    const auto r = reference_tokens(eos_engine, q, tok_->eos());
    const Outcome oq = collect(*s2.submit(q));
    EXPECT_EQ(oq.text, tok_->decode(r));
    EXPECT_EQ(oq.completion_tokens, int(r.size()));
    stops += oq.finish == Finish::kStop;
  }
  EXPECT_GT(stops, 10);
  // ignore_eos: the same draws run on to max_tokens, EOS included.
  for (uint64_t seed = 0; seed < 5; ++seed) {
    auto q = params({words_[0]}, 30, seed);
    q.ignore_eos = true;
    const Outcome oq = collect(*s2.submit(q));
    EXPECT_EQ(oq.finish, Finish::kLength) << seed;
    EXPECT_EQ(oq.completion_tokens, 30) << seed;
  }
}

TEST_F(SchedulerTest, CancelFreesTheSequence) {
  auto eo = engine_options();
  eo.max_seqs = 2;
  eo.step_time = std::chrono::microseconds(1000);
  test::FakeEngine engine(eo);
  Metrics metrics;
  Scheduler s(engine, *tok_, {}, &metrics);
  auto a = s.submit(params({words_[0]}, 200, 1));
  Request::Update u;
  ASSERT_TRUE(a->wait(u, milliseconds(5000)));
  EXPECT_EQ(s.running(), 1);
  a->cancel();
  EXPECT_EQ(collect(*a).finish, Finish::kCancelled);
  s.wait_idle();
  EXPECT_EQ(s.running(), 0);
  EXPECT_EQ(engine.open_now(), 0);
  EXPECT_NE(metrics.serialize().find("futr_requests_total{finish=\"cancelled\"} 1"), std::string::npos);
  // A waiting request that is cancelled never opens a sequence.
  auto eo1 = engine_options();
  eo1.max_seqs = 1;
  eo1.step_time = std::chrono::microseconds(1000);
  test::FakeEngine one(eo1);
  Scheduler s1(one, *tok_, {});
  auto b = s1.submit(params({words_[0]}, 100, 1));
  auto c = s1.submit(params({words_[0]}, 100, 2));
  c->cancel();
  EXPECT_EQ(collect(*c).finish, Finish::kCancelled);
  EXPECT_EQ(collect(*b).finish, Finish::kLength);
  EXPECT_EQ(one.opened(), 1);
}

TEST_F(SchedulerTest, DrainFinishesAcceptedRequestsAndRefusesNewOnes) {
  auto eo = engine_options();
  eo.max_seqs = 1;
  eo.step_time = std::chrono::microseconds(500);
  test::FakeEngine engine(eo);
  Scheduler s(engine, *tok_, {});
  auto a = s.submit(params({words_[0]}, 40, 1));
  auto b = s.submit(params({words_[1]}, 40, 2));  // waiting when the drain starts
  s.begin_drain();
  try {
    s.submit(params({words_[0]}, 5, 3));
    ADD_FAILURE() << "no AdmissionError";
  } catch (const AdmissionError& e) {
    EXPECT_EQ(e.status(), 503);
  }
  s.wait_idle();
  EXPECT_EQ(collect(*a).finish, Finish::kLength);
  EXPECT_EQ(collect(*b).finish, Finish::kLength);
}

}  // namespace
}  // namespace futr::server
