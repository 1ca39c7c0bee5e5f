// The prompt-lookup drafter (runtime/ngram_drafter.h) against a brute-force
// model of its policy (a scan of the whole sequence for every lookup, the copy
// pointer re-derived from the tokens pushed since its proposal) through random
// pushes that follow the drafts or not, truncates and verdicts; the copy
// pointer; one-token matches after rejected drafts; the adaptive draft length;
// no proposal without a match; tokens beyond the packed key; the
// configuration's ranges.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/ngram_drafter.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

// The specification, by scanning. Lookup: for n = ngram_max..ngram_min, the
// most recent p < L with t[p-n, p) == t[L-n, L). The copy pointer: the
// source q0 and run m0 of the last proposal, made when the sequence had L0
// tokens; alive (no truncate since) while every token pushed since continued
// the source, t[q0 + j] == t[L0 + j], at (q0 + L - L0, m0 + L - L0).
struct Reference {
  NgramDrafterConfig c;
  std::vector<int32_t> t;
  int k;
  bool first_accepted = true;
  int64_t q0 = -1, m0 = 0, L0 = 0;
  int64_t last_m = 0;

  explicit Reference(const NgramDrafterConfig& config) : c(config), k(config.draft_max) {}

  void truncate(int64_t len) {
    t.resize(size_t(len));
    q0 = -1;
  }
  // The pointer's (q, m); m == 0: none.
  std::pair<int64_t, int64_t> pointer() const {
    const int64_t L = int64_t(t.size());
    if (q0 < 0) return {-1, 0};
    for (int64_t j = 0; j < L - L0; ++j)
      if (t[size_t(q0 + j)] != t[size_t(L0 + j)]) return {-1, 0};
    return {q0 + L - L0, m0 + L - L0};
  }
  std::vector<int32_t> draft(int max_tokens) {
    const int64_t L = int64_t(t.size());
    last_m = 0;
    int64_t q = -1, m = 0;
    for (int n = c.ngram_max; n >= c.ngram_min && m == 0; --n) {
      if (L < n) continue;
      for (int64_t p = L - 1; p >= n; --p) {
        if (!std::equal(t.begin() + (p - n), t.begin() + p, t.begin() + (L - n))) continue;
        q = p, m = n;
        break;
      }
    }
    const auto [pq, pm] = pointer();
    if (pm > 0 && pm >= m) q = pq, m = pm;
    if (m == 0 || (m == 1 && !first_accepted)) return {};
    if (m >= NgramDrafter::kLongRun) k = c.draft_max;
    const int len = std::min(k, max_tokens);
    if (len <= 0) return {};
    q0 = q, m0 = m, L0 = L, last_m = m;
    return {t.begin() + q, t.begin() + std::min<int64_t>(q + len, L)};
  }
  void observe(int drafted, int accepted) {
    if (drafted <= 0) return;
    k = accepted >= drafted ? std::min(c.draft_max, k + 2) : std::clamp(accepted + 1, 1, c.draft_max);
    first_accepted = accepted > 0;
  }
};

TEST(NgramDrafter, MatchesTheBruteForceModelThroughPushesTruncatesAndVerdicts) {
  for (const int vocab : {2, 3, 5, 40})
    for (const NgramDrafterConfig c :
         {NgramDrafterConfig{8, 3, 1}, NgramDrafterConfig{5, 2, 2}, NgramDrafterConfig{3, 3, 3},
          NgramDrafterConfig{64, 1, 1}, NgramDrafterConfig{7, 3, 2}}) {
      std::mt19937 rng(uint32_t(vocab * 131 + c.draft_max + c.ngram_min));
      NgramDrafter d(c);
      Reference ref(c);
      std::vector<int32_t> out;
      int proposals = 0, continued = 0, long_runs = 0;
      for (int it = 0; it < 3000; ++it) {
        const uint32_t r = rng() % 20;
        if (r < 2 && !ref.t.empty()) {
          const int64_t len = int64_t(ref.t.size()) - int64_t(rng() % std::min<size_t>(ref.t.size() + 1, 12));
          d.truncate(len);
          ref.truncate(len);
        } else {
          if (r < 6 && !out.empty()) {  // a verdict on the last proposal
            const int accepted = int(rng() % (out.size() + 1));
            d.observe(int(out.size()), accepted);
            ref.observe(int(out.size()), accepted);
          }
          // Mostly the draft's first token (the model copying), else a random one.
          const int32_t t = !out.empty() && rng() % 3 != 0 ? out[0] : int32_t(rng() % uint32_t(vocab));
          continued += !out.empty() && d.pointer() >= 0 && t == out[0];
          d.push(t);
          ref.t.push_back(t);
        }
        ASSERT_EQ(d.size(), int64_t(ref.t.size()));
        ASSERT_EQ(d.pointer(), ref.pointer().first) << "step " << it;
        const int max_tokens = 1 + int(rng() % 70);
        d.draft(max_tokens, out);
        const auto want = ref.draft(max_tokens);
        ASSERT_EQ(out, want) << "vocab " << vocab << ", draft_max " << c.draft_max << ", n " << c.ngram_max
                             << ".." << c.ngram_min << ", length " << ref.t.size() << ", step " << it;
        ASSERT_EQ(d.last_match(), ref.last_m);
        ASSERT_EQ(d.current_k(), ref.k);
        proposals += out.empty() ? 0 : 1;
        long_runs += ref.last_m >= NgramDrafter::kLongRun;
      }
      // The comparison above was also about real matches, continued runs and long ones.
      EXPECT_GT(proposals, 0);
      EXPECT_GT(continued, 0);
      EXPECT_GT(long_runs, 0);
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
  // A second "1 2 3 4" later (4, not 7: the copy pointer is dropped): the most
  // recent occurrence is taken.
  d.push(std::vector<int32_t>{4, 1, 2, 3});
  d.draft(8, out);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 1, 2, 3}));  // stops at the end of the sequence
  // Only a 1-gram matches.
  d.push(9);
  d.draft(3, out);
  EXPECT_EQ(d.last_match(), 1);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 8}));
}

// While the model copies, the drafts follow the copied run (the pointer) past
// a more recent occurrence of the last n-gram, and a run longer than any
// n-gram sets the draft length back to draft_max.
TEST(NgramDrafter, TheCopyPointerFollowsTheRun) {
  NgramDrafter d({8, 3, 1});
  // A passage 1 2 3 4 5 6, an aside with "2 3 4" followed by 10, then the copy starts: 1 2.
  d.push(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 9, 2, 3, 4, 10, 7, 1, 2});
  std::vector<int32_t> out;
  d.draft(2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4}));  // the lookup: "1 2", followed by 3 at position 2
  EXPECT_EQ(d.last_match(), 2);
  EXPECT_EQ(d.pointer(), 2);
  d.observe(2, 1);       // k = 2
  d.push(3), d.push(4);  // the model copies on
  EXPECT_EQ(d.pointer(), 4);
  // The lookup's most recent "2 3 4" is the aside's (-> 10); the pointer's run
  // "1 2 3 4" is longer: it goes on with 5, and a run of 4 sets k to 8.
  d.draft(8, out);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 6, 9, 2, 3, 4, 10, 7}));
  EXPECT_EQ(d.last_match(), 4);
  EXPECT_EQ(d.current_k(), 8);
  d.push(5);
  d.draft(2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{6, 9}));
  EXPECT_EQ(d.last_match(), 5);
  // A token that leaves the source drops the pointer: the lookup again.
  d.push(9);
  EXPECT_EQ(d.pointer(), -1);
  d.draft(2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3}));  // "9" at position 6
  EXPECT_EQ(d.last_match(), 1);
  // A truncate drops it too.
  d.push(2);
  EXPECT_EQ(d.pointer(), 8);
  d.truncate(d.size() - 1);
  EXPECT_EQ(d.pointer(), -1);
}

// A one-token match proposes only while drafts are being accepted; longer
// matches always do.
TEST(NgramDrafter, OneTokenMatchesWaitForAnAcceptedDraft) {
  NgramDrafter d({3, 3, 1});
  d.push(std::vector<int32_t>{5, 1, 2, 3, 4, 5});
  std::vector<int32_t> out;
  d.draft(3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3}));  // no draft yet: proposed
  EXPECT_EQ(d.last_match(), 1);
  d.observe(3, 0);
  d.truncate(d.size());  // (only the pointer: the verdict stays)
  d.draft(3, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(d.last_match(), 0);
  d.push(1);  // "5 1": a 2-gram match proposes anyway
  d.draft(3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{2}));  // k = 1 after the rejection
  d.observe(1, 1);
  d.push(std::vector<int32_t>{7, 4});  // only "4" matches, after an accepted draft
  d.draft(3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 1, 7}));
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
  EXPECT_EQ(out, (std::vector<int32_t>{6, 5, big}));  // the copy pointer follows it
  d.truncate(4);                                      // drops the pointer
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
