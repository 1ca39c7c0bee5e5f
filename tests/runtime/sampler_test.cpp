// Sampler (runtime/sampler.h): greedy = argmax, temperature, top-k, top-p and
// seeded reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampler.h"
#include "core/error.h"

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

}  // namespace
}  // namespace futr::runtime
