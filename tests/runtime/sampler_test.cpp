// Sampler (runtime/sampler.h): greedy = argmax, temperature, top-k, top-p, min-p,
// repetition / presence / frequency penalties, the range checks, seeded
// reproducibility, non-finite logits refused, the vocabulary limit (padded
// LM-head rows never drawn), and StopMatcher.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s({.temperature = 0.0f, .top_k = 40, .top_p = 0.9f, .seed = 1});
  std::vector<float> z = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(z), 1);
  EXPECT_EQ(argmax(z), 1);
  std::vector<float> neg = {-INFINITY, -5.0f, -INFINITY};
  EXPECT_EQ(argmax(neg), 1);
  EXPECT_THROW(argmax(std::vector<float>{}), Error);
}

TEST(Sampler, DistributionIsSoftmaxOverTemperature) {
  Sampler s({.temperature = 2.0f, .top_k = 0, .top_p = 1.0f, .seed = 1});
  std::vector<float> z = {1.0f, 2.0f, 0.0f};
  const auto d = s.distribution(z);
  ASSERT_EQ(d.size(), 3u);
  const double e1 = std::exp(0.5), e2 = std::exp(1.0), e0 = 1.0, sum = e0 + e1 + e2;
  EXPECT_EQ(d[0].first, 1);
  EXPECT_NEAR(d[0].second, e2 / sum, 1e-12);
  EXPECT_EQ(d[1].first, 0);
  EXPECT_NEAR(d[1].second, e1 / sum, 1e-12);
  EXPECT_EQ(d[2].first, 2);
  EXPECT_NEAR(d[2].second, e0 / sum, 1e-12);
}

TEST(Sampler, TopKAndTopPCut) {
  std::vector<float> z = {std::log(0.1f), std::log(0.4f), std::log(0.3f), std::log(0.2f)};
  Sampler k2({.temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .seed = 1});
  auto d = k2.distribution(z);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].first, 1);
  EXPECT_EQ(d[1].first, 2);
  EXPECT_NEAR(d[0].second, 0.4 / 0.7, 1e-6);
  // top-p 0.65: 0.4 + 0.3 = 0.7 >= 0.65 -> ids 1, 2.
  Sampler p({.temperature = 1.0f, .top_k = 0, .top_p = 0.65f, .seed = 1});
  d = p.distribution(z);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0].second + d[1].second, 1.0, 1e-12);
  // top-p tiny keeps the single most likely token.
  Sampler one({.temperature = 1.0f, .top_k = 0, .top_p = 0.01f, .seed = 1});
  d = one.distribution(z);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].first, 1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(one.sample(z), 1);
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  std::vector<float> z = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 42});
  std::map<int32_t, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(z)];
  EXPECT_NEAR(count[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(count[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(count[2] / double(n), 0.2, 0.02);
}

TEST(Sampler, SeedReproducible) {
  std::vector<float> z(100);
  for (size_t i = 0; i < z.size(); ++i) z[i] = float(std::sin(double(i)));
  auto run = [&](uint64_t seed) {
    Sampler s({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(z));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, RejectsBadSettings) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.temperature = 1.0f, .top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.temperature = 1.0f, .top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.temperature = NAN}), Error);
}

// Each new control is refused outside its range, with the range in the message.
TEST(Sampler, RangesAreCheckedAndNamed) {
  auto msg = [](SamplerConfig c) -> std::string {
    try {
      validate_sampler_config(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(msg({}), "");
  EXPECT_EQ(msg({.temperature = 1.0f,
                 .top_p = 1.0f,
                 .min_p = 1.0f,
                 .repetition_penalty = 10.0f,
                 .presence_penalty = -2.0f,
                 .frequency_penalty = 2.0f,
                 .penalty_last_n = 0}),
            "");
  EXPECT_NE(msg({.temperature = 101.0f}).find("--temperature must be in [0, 100] (got 101)"),
            std::string::npos);
  EXPECT_NE(msg({.min_p = -0.1f}).find("--min-p must be in [0, 1] (got -0.1)"), std::string::npos);
  EXPECT_NE(msg({.min_p = 1.5f}).find("--min-p must be in [0, 1]"), std::string::npos);
  EXPECT_NE(msg({.min_p = NAN}).find("--min-p"), std::string::npos);
  EXPECT_NE(msg({.repetition_penalty = 0.0f}).find("--repetition-penalty must be in (0, 10]"),
            std::string::npos);
  EXPECT_NE(msg({.repetition_penalty = 11.0f}).find("(0, 10]"), std::string::npos);
  EXPECT_NE(msg({.presence_penalty = 2.5f}).find("--presence-penalty must be in [-2, 2] (got 2.5)"),
            std::string::npos);
  EXPECT_NE(msg({.frequency_penalty = -3.0f}).find("--frequency-penalty must be in [-2, 2]"),
            std::string::npos);
  EXPECT_NE(msg({.penalty_last_n = -1}).find("--penalty-last-n must be in [0, 1048576]"), std::string::npos);
  EXPECT_NE(msg({.stop = {""}}).find("--stop: each stop string must have 1 to 256 bytes (got 0)"),
            std::string::npos);
  EXPECT_NE(msg({.stop = {std::string(257, 'x')}}).find("(got 257)"), std::string::npos);
  EXPECT_NE(msg({.stop = std::vector<std::string>(17, "x")}).find("--stop: at most 16 stop strings (got 17)"),
            std::string::npos);
  // The server spells fields without "--".
  try {
    validate_sampler_config({.min_p = 2.0f}, "");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("min-p must be", 0), 0u) << e.what();
  }
  EXPECT_THROW(Sampler({.presence_penalty = 5.0f}), Error);
}

TEST(Sampler, MinPDropsWhatIsLessLikelyThanAFractionOfTheBest) {
  // p = 0.5, 0.25, 0.15, 0.1; min_p 0.25 -> floor 0.125: ids 0, 1, 2 stay.
  const std::vector<float> z = {std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.1f)};
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1, .min_p = 0.25f});
  const auto d = s.distribution(z);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2].first, 2);
  EXPECT_NEAR(d[0].second, 0.5 / 0.9, 1e-6);
  EXPECT_NEAR(d[2].second, 0.15 / 0.9, 1e-6);
  // min_p 1 keeps only the most likely (and ties with it).
  Sampler one({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1, .min_p = 1.0f});
  EXPECT_EQ(one.distribution(z).size(), 1u);
  // Applied before top-p: min-p 0.25 then top-p 0.6 keeps ids 0 and 1 (0.556 + 0.278 >= 0.6).
  Sampler both({.temperature = 1.0f, .top_k = 0, .top_p = 0.6f, .seed = 1, .min_p = 0.25f});
  EXPECT_EQ(both.distribution(z).size(), 2u);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  Sampler s({.temperature = 0.0f, .repetition_penalty = 2.0f});
  const std::vector<float> z = {3.0f, 2.0f, -1.0f, 0.5f};
  EXPECT_EQ(s.penalized(z), z);      // no history yet
  s.accept(0, /*generated=*/false);  // prompt tokens count for the repetition penalty
  s.accept(2, true);
  s.accept(2, true);  // counted once
  EXPECT_EQ(s.penalized(z), (std::vector<float>{1.5f, 2.0f, -2.0f, 0.5f}));
  EXPECT_EQ(s.sample(z), 1);  // greedy sees the penalized logits: 2.0 > 1.5
  s.reset_history();
  EXPECT_EQ(s.sample(z), 0);
}

// Every sampling parameter at the ends of its accepted range (the smallest
// positive float for the open ends), with penalties over a history, draws a
// token from ordinary logits and from logits near the float limits: an
// accepted value never fails later (before, a repetition_penalty of 1e-40
// took x / r to +inf, refused as a broken forward pass).
TEST(Sampler, RangeEndsOfEveryParameterSample) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<SamplerConfig> configs;
  for (float t : {0.0f, tiny, 1.0f, 100.0f})
    for (float r : {tiny, 1e-30f, 1.0f, 10.0f})
      for (float pen : {-2.0f, 0.0f, 2.0f})
        for (float p : {tiny, 1.0f})
          for (float m : {0.0f, 1.0f})
            configs.push_back({.temperature = t,
                               .top_k = t == 1.0f ? 1 : 0,
                               .top_p = p,
                               .seed = 7,
                               .min_p = m,
                               .repetition_penalty = r,
                               .presence_penalty = pen,
                               .frequency_penalty = -pen,
                               .penalty_last_n = 0});
  const std::vector<std::vector<float>> rows = {
      {3.0f, -2.0f, 0.5f, 0.0f},
      {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1e30f, -1e30f},
      {tiny, -tiny, 0.0f, -0.0f}};
  for (const auto& c : configs) {
    for (const auto& z : rows) {
      Sampler s(c);
      for (int i = 0; i < 4; ++i) s.accept(i, i % 2 == 0);
      for (int k = 0; k < 3; ++k) {
        int32_t id = -1;
        ASSERT_NO_THROW(id = s.sample(z))
            << "t " << c.temperature << " r " << c.repetition_penalty << " pen " << c.presence_penalty
            << " top_p " << c.top_p << " min_p " << c.min_p;
        EXPECT_GE(id, 0);
        EXPECT_LT(id, 4);
        s.accept(id, true);
      }
      for (float x : s.penalized(z)) EXPECT_TRUE(std::isfinite(x));
    }
  }
}

TEST(Sampler, PresenceAndFrequencyPenaliesCountGeneratedTokens) {
  Sampler s({.temperature = 0.0f, .presence_penalty = 0.5f, .frequency_penalty = 0.25f});
  const std::vector<float> z = {1.0f, 1.0f, 1.0f, 1.0f};
  s.accept(3, false);  // a prompt token: not penalized by presence / frequency
  s.accept(1, true);
  s.accept(2, true);
  s.accept(2, true);
  s.accept(2, true);
  // id 1: 1 - 0.5 - 0.25 = 0.25; id 2: 1 - 0.5 - 0.75 = -0.25.
  EXPECT_EQ(s.penalized(z), (std::vector<float>{1.0f, 0.25f, -0.25f, 1.0f}));
  // Negative penalties encourage repeats.
  Sampler e({.temperature = 0.0f, .presence_penalty = -1.0f});
  e.accept(2, true);
  EXPECT_EQ(e.sample(z), 2);
  // Ids outside the vocabulary are ignored.
  e.accept(99, true);
  EXPECT_EQ(e.penalized(z).size(), 4u);
}

TEST(Sampler, PenaltyWindowKeepsTheLastNTokens) {
  Sampler s({.temperature = 0.0f, .repetition_penalty = 4.0f, .penalty_last_n = 2});
  const std::vector<float> z = {4.0f, 4.0f, 4.0f};
  s.accept(0, true);
  s.accept(1, true);
  s.accept(2, true);  // 0 leaves the window
  EXPECT_EQ(s.penalized(z), (std::vector<float>{4.0f, 1.0f, 1.0f}));
  Sampler all({.temperature = 0.0f, .repetition_penalty = 4.0f, .penalty_last_n = 0});
  for (int i = 0; i < 3; ++i) all.accept(i, true);
  EXPECT_EQ(all.penalized(z), (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

TEST(Sampler, PenaltiesAlsoShapeTheSampledDistribution) {
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 3, .frequency_penalty = 1.0f});
  const std::vector<float> z = {0.0f, 0.0f};
  s.accept(0, true);
  const auto d = s.distribution(z);  // z = {-1, 0}
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].first, 1);
  EXPECT_NEAR(d[0].second, 1.0 / (1.0 + std::exp(-1.0)), 1e-12);
}

// NaN or +inf among the logits is a clear error naming the id, whatever the
// settings (greedy, temperature, penalties); -inf is a masked id and allowed.
TEST(Sampler, NonFiniteLogitsAreRefusedNamingTheId) {
  const std::vector<SamplerConfig> configs = {
      {.temperature = 0.0f},
      {.temperature = 0.8f, .top_k = 0, .top_p = 1.0f, .seed = 3},
      {.temperature = 0.8f, .top_k = 2, .top_p = 0.5f, .seed = 3, .min_p = 0.1f},
      {.temperature = 0.0f, .repetition_penalty = 1.3f, .presence_penalty = 0.5f}};
  for (const SamplerConfig& c : configs) {
    Sampler s(c);
    s.accept(1, true);  // penalties have a history
    EXPECT_FUTR_ERROR(s.sample(std::vector<float>{0.5f, NAN, 1.0f}), "logit of id 1 is nan");
    EXPECT_FUTR_ERROR(s.sample(std::vector<float>{NAN, NAN, NAN}), "not finite");
    EXPECT_FUTR_ERROR(s.sample(std::vector<float>{0.5f, 2.0f, INFINITY}), "logit of id 2 is inf");
    EXPECT_FUTR_ERROR(s.sample(std::vector<float>{-INFINITY, -INFINITY}), "all 2 drawable logits are -inf");
    EXPECT_FUTR_ERROR(s.sample(std::vector<float>{}), "empty logits");
    // -inf entries are allowed and never drawn.
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, 0.0f, -INFINITY}), 1);
  }
  Sampler t({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f});
  EXPECT_FUTR_ERROR(t.distribution(std::vector<float>{NAN, 1.0f}), "logit of id 0 is nan");
}

// Ids at or beyond limit_vocab() (a vocabulary padded beyond the tokenizer)
// are never drawn, even where their logits are the largest; what lies there
// is not even looked at.
TEST(Sampler, VocabularyLimitMasksPaddedIds) {
  std::vector<float> z = {0.0f, 1.0f, 0.5f, 9.0f, 8.0f, NAN};  // ids 3.. are padding
  Sampler greedy({.temperature = 0.0f});
  EXPECT_EQ(greedy.sample(std::vector<float>(z.begin(), z.begin() + 5)), 3);  // unmasked: a padded id wins
  greedy.limit_vocab(3);
  EXPECT_EQ(greedy.vocab_limit(), 3);
  EXPECT_EQ(greedy.sample(z), 1);
  Sampler warm({.temperature = 5.0f, .top_k = 0, .top_p = 1.0f, .seed = 11, .repetition_penalty = 1.2f});
  warm.limit_vocab(3);
  warm.accept(4, true);  // a padded id in the history changes nothing
  const auto d = warm.distribution(z);
  ASSERT_EQ(d.size(), 3u);
  double sum = 0;
  for (const auto& [id, p] : d) {
    EXPECT_LT(id, 3);
    sum += p;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  for (int i = 0; i < 500; ++i) EXPECT_LT(warm.sample(z), 3);
  // A limit at or beyond the row is the row; <= 0 is no limit.
  Sampler wide({.temperature = 0.0f});
  wide.limit_vocab(100);
  EXPECT_EQ(wide.sample(std::vector<float>{0.0f, 2.0f}), 1);
  wide.limit_vocab(0);
  EXPECT_EQ(wide.sample(std::vector<float>{0.0f, 2.0f}), 1);
}

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheFirstMatch) {
  StopMatcher m({"</s>", "\n\nUser:"});
  std::string shown;
  for (const char* piece : {"Hello", " wor", "ld<", "/", "s", "> ignored"}) shown += m.push(piece);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</s>");
  EXPECT_EQ(shown, "Hello world");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");

  // A held-back prefix that turns out not to be a stop string is released.
  StopMatcher n({"\n\nUser:"});
  EXPECT_EQ(n.push("a\n"), "a");
  EXPECT_EQ(n.push("\nUs"), "");
  EXPECT_EQ(n.push("ually"), "\n\nUsually");
  EXPECT_EQ(n.push("\n"), "");
  EXPECT_EQ(n.flush(), "\n");
  EXPECT_FALSE(n.stopped());

  // The match that starts first wins; no stops: everything passes.
  StopMatcher e({"cd", "bcde"});
  EXPECT_EQ(e.push("abcdef"), "a");
  EXPECT_EQ(e.matched(), "bcde");
  StopMatcher none({});
  EXPECT_EQ(none.push("x"), "x");
}

}  // namespace
}  // namespace futr::runtime
