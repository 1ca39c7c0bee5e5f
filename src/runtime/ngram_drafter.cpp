// Prompt-lookup drafts (see ngram_drafter.h).
#include "runtime/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace futr::runtime {

NgramDrafter::NgramDrafter(const NgramDrafterConfig& config) : config_(config) {
  FUTR_CHECK(config.draft_max >= 1 && config.draft_max <= kMaxDraft,
             "--draft-max must be in [1, {}] (got {})", kMaxDraft, config.draft_max);
  FUTR_CHECK(config.ngram_max >= 1 && config.ngram_max <= kMaxNgram,
             "the longest n-gram must be in [1, {}] (got {})", kMaxNgram, config.ngram_max);
  FUTR_CHECK(config.ngram_min >= 1 && config.ngram_min <= config.ngram_max,
             "the shortest n-gram must be in [1, {}] (got {})", config.ngram_max, config.ngram_min);
  k_ = config.draft_max;
}

bool NgramDrafter::key_of(int64_t end, int n, uint64_t& key) const {
  key = 0;
  for (int64_t i = end - n; i < end; ++i) {
    const int32_t t = tokens_[size_t(i)];
    if (t < 0 || t >= (1 << 21)) return false;
    key = (key << 21) | uint64_t(t);
  }
  return true;
}

void NgramDrafter::push(int32_t token) {
  const int64_t p = int64_t(tokens_.size());  // the new token's position: the follower of t[p-n, p)
  FUTR_CHECK(p < INT32_MAX, "the drafter holds {} tokens already", p);
  if (ptr_m_ > 0) {  // the copy pointer follows a token that continues its source, else it is dropped
    if (ptr_q_ < p && tokens_[size_t(ptr_q_)] == token) {
      ++ptr_q_;
      ++ptr_m_;
    } else {
      ptr_m_ = 0;
    }
  }
  tokens_.push_back(token);
  for (int n = 1; n <= kMaxNgram; ++n) {
    std::vector<int32_t>& prev = prev_[size_t(n - 1)];
    uint64_t key = 0;
    if (p < n || !key_of(p, n, key)) {
      prev.push_back(kNotIndexed);
      continue;
    }
    auto [it, inserted] = head_[size_t(n - 1)].try_emplace(key, int32_t(p));
    prev.push_back(inserted ? kNone : it->second);
    it->second = int32_t(p);
  }
}

void NgramDrafter::truncate(int64_t len) {
  FUTR_CHECK(len >= 0 && len <= size(), "drafter: cannot keep {} of {} tokens", len, size());
  ptr_m_ = 0;
  // Newest first: each map entry goes back to what it was before the position came.
  for (int64_t p = size() - 1; p >= len; --p) {
    for (int n = 1; n <= kMaxNgram; ++n) {
      const int32_t prev = prev_[size_t(n - 1)][size_t(p)];
      if (prev == kNotIndexed) continue;
      uint64_t key = 0;
      key_of(p, n, key);
      auto& head = head_[size_t(n - 1)];
      if (prev == kNone) {
        head.erase(key);
      } else {
        head[key] = prev;
      }
    }
  }
  tokens_.resize(size_t(len));
  for (auto& prev : prev_) prev.resize(size_t(len));
}

void NgramDrafter::draft(int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  last_match_ = 0;
  const int64_t L = size();
  // The source: the lookup's most recent match of the longest n-gram, unless
  // the copy pointer's run is at least as long.
  int64_t q = -1, m = 0;
  for (int n = std::min(config_.ngram_max, kMaxNgram); n >= config_.ngram_min; --n) {
    uint64_t key = 0;
    if (L < n || !key_of(L, n, key)) continue;
    const auto& head = head_[size_t(n - 1)];
    const auto it = head.find(key);
    if (it == head.end()) continue;
    q = it->second;  // < L: the last n-gram itself has no follower yet
    m = n;
    break;
  }
  if (ptr_m_ > 0 && ptr_m_ >= m) q = ptr_q_, m = ptr_m_;
  if (m == 0) return;
  if (m == 1 && !last_first_accepted_) return;  // a one-token match proposes after an accepted draft only
  if (m >= kLongRun) k_ = config_.draft_max;
  int k = std::min(k_, max_tokens);
  if (step_rows_ && k > 0) {
    // A padded step (k + 1 rows run as step_rows(k + 1)): filled where the
    // caps allow, else shortened to the longest draft that is not padded
    // (8 rows of a bucket of 8 rather than 9 of a bucket of 16).
    const int cap = std::min(max_tokens, config_.draft_max), fill = step_rows_(k + 1) - 1;
    if (fill <= cap) {
      k = fill;
    } else {
      int r = k;
      while (r > 1 && step_rows_(r + 1) != r + 1) --r;
      k = r;
    }
  }
  if (k <= 0) return;
  out.assign(tokens_.begin() + q, tokens_.begin() + std::min<int64_t>(q + k, L));
  ptr_q_ = q, ptr_m_ = m;
  last_match_ = int(std::min<int64_t>(m, INT32_MAX));
}

void NgramDrafter::observe(int drafted, int accepted) {
  if (drafted <= 0) return;
  k_ = accepted >= drafted ? std::min(config_.draft_max, k_ + 2)
                           : std::clamp(accepted + 1, 1, config_.draft_max);
  last_first_accepted_ = accepted > 0;
}

}  // namespace futr::runtime
