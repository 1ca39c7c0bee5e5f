// The prompt-lookup drafter (runtime/ngram_drafter.h) against a brute-force
// scan of the whole sequence after every push and truncate (random sequences
// over small vocabularies, so that n-grams repeat at every n); the adaptive
// draft length; no proposal without a match; tokens beyond the packed key;
// the configuration's ranges.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/ngram_drafter.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

// The specification, by scanning: for n = ngram_max..ngram_min, the most
// recent p < L with t[p-n, p) == t[L-n, L) proposes t[p, min(p + k, L)).
std::vector<int32_t> brute_force(const std::vector<int32_t>& t, const NgramDrafterConfig& c, int k) {
  const int64_t L = int64_t(t.size());
  for (int n = c.ngram_max; n >= c.ngram_min; --n) {
    if (L < n) continue;
    for (int64_t p = L - 1; p >= n; --p) {
      if (!std::equal(t.begin() + (p - n), t.begin() + p, t.begin() + (L - n))) continue;
      return {t.begin() + p, t.begin() + std::min<int64_t>(p + k, L)};
    }
  }
  return {};
}

TEST(NgramDrafter, MatchesTheBruteForceScanThroughPushesAndTruncates) {
  for (const int vocab : {2, 3, 5, 40})
    for (const NgramDrafterConfig c : {NgramDrafterConfig{8, 3, 1}, NgramDrafterConfig{5, 2, 2},
                                       NgramDrafterConfig{3, 3, 3}, NgramDrafterConfig{64, 1, 1}}) {
      std::mt19937 rng(uint32_t(vocab * 131 + c.draft_max));
      NgramDrafter d(c);
      std::vector<int32_t> mirror;
      std::vector<int32_t> out;
      int proposals = 0;
      for (int it = 0; it < 1500; ++it) {
        if (rng() % 10 == 0 && !mirror.empty()) {
          const int64_t len =
              int64_t(mirror.size()) - int64_t(rng() % std::min<size_t>(mirror.size() + 1, 12));
          d.truncate(len);
          mirror.resize(size_t(len));
        } else {
          const int32_t t = int32_t(rng() % uint32_t(vocab));
          d.push(t);
          mirror.push_back(t);
        }
        ASSERT_EQ(d.size(), int64_t(mirror.size()));
        const int max_tokens = 1 + int(rng() % 70);
        d.draft(max_tokens, out);
        const auto want = brute_force(mirror, c, std::min(d.current_k(), max_tokens));
        ASSERT_EQ(out, want) << "vocab " << vocab << ", draft_max " << c.draft_max << ", n " << c.ngram_max
                             << ".." << c.ngram_min << ", length " << mirror.size() << ", step " << it;
        proposals += out.empty() ? 0 : 1;
      }
      EXPECT_GT(proposals, 0);  // the comparison above was also about real matches
    }
}

TEST(NgramDrafter, PrefersTheLongestMatchThenTheMostRecent) {
  NgramDrafter d({8, 3, 1});
  // ... 1 2 3 [7 7] ... 9 2 3 [8 8] ... 1 2 3 -> the 3-gram "1 2 3" wins over the later 2-gram "2 3".
  d.push(std::vector<int32_t>{1, 2, 3, 7, 7, 5, 9, 2, 3, 8, 8, 5, 1, 2, 3});
  std::vector<int32_t> out;
  d.draft(2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(d.last_match(), 3);
  // A second "1 2 3 4" later: the most recent occurrence is taken.
  d.push(std::vector<int32_t>{4, 1, 2, 3});
  d.draft(8, out);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 1, 2, 3}));  // stops at the end of the sequence
  // Only a 1-gram matches.
  d.push(9);
  d.draft(3, out);
  EXPECT_EQ(d.last_match(), 1);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 8}));
}

TEST(NgramDrafter, NoMatchNoProposal) {
  NgramDrafter d;
  std::vector<int32_t> out{1, 2};
  d.draft(8, out);
  EXPECT_TRUE(out.empty());  // empty sequence
  for (int32_t t = 0; t < 100; ++t) d.push(t);
  d.draft(8, out);
  EXPECT_TRUE(out.empty());  // all distinct
  EXPECT_EQ(d.last_match(), 0);
  d.push(50);
  d.draft(0, out);
  EXPECT_TRUE(out.empty());  // no room
  d.draft(3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{51, 52, 53}));
}

TEST(NgramDrafter, DraftLengthAdaptsToAcceptance) {
  NgramDrafter d({8, 3, 1});
  EXPECT_EQ(d.current_k(), 8);
  d.observe(8, 2);
  EXPECT_EQ(d.current_k(), 3);  // accepted + 1
  d.observe(3, 3);
  EXPECT_EQ(d.current_k(), 5);  // all accepted: + 2
  d.observe(5, 5);
  d.observe(7, 7);
  EXPECT_EQ(d.current_k(), 8);  // capped at draft_max
  d.observe(8, 0);
  EXPECT_EQ(d.current_k(), 1);  // never below 1
  d.observe(0, 0);
  EXPECT_EQ(d.current_k(), 1);  // no draft: no change
  // The proposal follows k.
  for (int32_t t : {1, 2, 3, 4, 5, 6, 1, 2}) d.push(t);
  std::vector<int32_t> out;
  d.draft(8, out);
  EXPECT_EQ(out, (std::vector<int32_t>{3}));
}

// An engine that pads steps to buckets (1, 2, 4, 8, ...): each proposal is
// lengthened to fill its step's bucket (k + 1 rows), within max_tokens.
TEST(NgramDrafter, ProposalsFillTheStepsPadding) {
  NgramDrafter d({8, 3, 1});
  d.set_step_rows([](int r) {
    int b = 1;
    while (b < r) b *= 2;
    return b;
  });
  for (int i = 0; i < 3; ++i)
    for (int32_t t = 1; t <= 20; ++t) d.push(t);  // 1..20 three times: long matches
  std::vector<int32_t> out;
  auto drafted = [&](int max_tokens) {
    d.draft(max_tokens, out);
    return int(out.size());
  };
  d.observe(8, 1);  // k = 2: 3 rows, padded to 4: 3 tokens
  EXPECT_EQ(d.current_k(), 2);
  EXPECT_EQ(drafted(8), 3);
  EXPECT_EQ(drafted(2), 1);  // the caller's cap: 3 rows would pad to 4: shortened to 2 rows
  d.observe(8, 4);           // k = 5: 6 rows, padded to 8: 7 tokens
  EXPECT_EQ(drafted(8), 7);
  d.observe(8, 0);  // k = 1: 2 rows, no padding
  EXPECT_EQ(drafted(8), 1);
  d.observe(1, 1), d.observe(3, 3), d.observe(5, 5), d.observe(7, 7);  // k = 8: 9 rows would pad to 16
  EXPECT_EQ(d.current_k(), 8);
  EXPECT_EQ(drafted(64), 7);  // shortened to a bucket of 8, not filled past draft_max
  EXPECT_EQ(drafted(5), 3);   // the caller's cap: 6 rows would pad to 8, beyond it: 4
  d.set_step_rows({});
  d.observe(8, 1);
  EXPECT_EQ(drafted(8), 2);  // without the hint: k itself
}

TEST(NgramDrafter, TokensBeyondTheKeyAreFollowersButNeverKeys) {
  NgramDrafter d({4, 3, 1});
  const int32_t big = 1 << 22;
  d.push(std::vector<int32_t>{5, big, 6, 5});
  std::vector<int32_t> out;
  d.draft(4, out);
  EXPECT_EQ(out, (std::vector<int32_t>{big, 6, 5}));  // "5" matched, the big id proposed
  d.push(big);
  d.draft(4, out);
  EXPECT_TRUE(out.empty());  // n-grams ending in the big id are not indexed
  d.truncate(0);
  EXPECT_EQ(d.size(), 0);
  d.draft(4, out);
  EXPECT_TRUE(out.empty());
}

TEST(NgramDrafter, ConfigurationRangesAreChecked) {
  EXPECT_FUTR_ERROR(NgramDrafter({0, 3, 1}), "--draft-max must be in [1, 64]");
  EXPECT_FUTR_ERROR(NgramDrafter({65, 3, 1}), "--draft-max must be in [1, 64]");
  EXPECT_FUTR_ERROR(NgramDrafter({8, 4, 1}), "longest n-gram");
  EXPECT_FUTR_ERROR(NgramDrafter({8, 2, 3}), "shortest n-gram");
  NgramDrafter d;
  d.push(1);
  EXPECT_FUTR_ERROR(d.truncate(2), "cannot keep 2 of 1 tokens");
  EXPECT_FUTR_ERROR(d.truncate(-1), "cannot keep");
}

}  // namespace
}  // namespace futr::runtime
