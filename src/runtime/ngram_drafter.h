// Draft tokens for speculative decoding without a draft model: prompt lookup
// (an n-gram match in the sequence's own tokens), as in vLLM's `ngram`
// speculator, TensorRT-LLM's prompt-lookup decoding and llama.cpp's lookup
// decoding.
//
// Drafter: what runtime/speculative.h asks of any drafter. It mirrors the
// tokens of one sequence (push / truncate), proposes up to `max_tokens` tokens
// that may follow them (draft), and hears how many of its last proposal the
// target model accepted (observe).
//
// NgramDrafter. With the sequence t[0, L) (prompt and output alike), a
// proposal comes from a source position q: the tokens before q end as the
// sequence ends, t[q - m, q) == t[L - m, L) with m >= 1 (the run), and the
// proposal is t[q, min(q + k, L)). The source is
//   the copy pointer, (q, m) of the last proposal advanced over every token
//     pushed since: a pushed token equal to t[q] makes it (q + 1, m + 1), any
//     other token drops it, and so does a truncate (which keeps k and the
//     last verdict). So while the model keeps copying a passage, the drafts
//     keep following it, past n-grams that also occur elsewhere, with m the
//     length of the copied run so far;
//   or the lookup: for n = ngram_max down to ngram_min, if the last n tokens
//     t[L-n, L) also occur earlier, ending at some p - 1 < L - 1 (so t[p]
//     follows them), the most recent such p, as (p, n); else n - 1.
// The pointer is the source when it is alive and m >= the lookup's n (or the
// lookup finds nothing); otherwise the lookup's (p, n), which becomes the
// pointer when it is proposed. No source: no proposal (an ordinary decode
// step). A run of m == 1 (one matching token: with SmolLM2 on
// bench/speculative_generate.py's workloads, the first drafted token was
// right for 6-40% of such matches) proposes only if the last proposal's first
// token was accepted (or there was no proposal yet); otherwise no proposal.
// k is adaptive: it starts at draft_max; a draft accepted in full raises it by
// 2, a partly rejected one sets it to max(1, accepted + 1) (what the last
// verification showed would have been enough, plus one to probe); a source
// with m >= kLongRun (a run longer than any n-gram the lookup matches: only
// the pointer gets there) sets it back to draft_max first; always
// <= draft_max. Each proposal is then sized to the step it runs in
// (set_step_rows).
//
// Index: per n, a hash map from the n-gram to the most recent follower
// position p, and per position a link to the previous follower of the same
// n-gram (prev[n][p]), so that
//   push()      costs O(ngram_max) (one map update per n),
//   draft()     costs O(ngram_max) lookups + the tokens copied,
//   truncate()  costs O(ngram_max) per dropped token (the map entry goes back
//               to prev), independent of the sequence's length.
// n-grams are packed into 64-bit keys, 21 bits per token; a token outside
// [0, 2^21) is never part of an indexed n-gram (it can still be proposed as a
// follower). Vocabularies are far below that (Llama 3: 128256).
//
// Tests: tests/runtime/ngram_drafter_test.cpp (against a brute-force model of
// the policy: a scan per lookup, the pointer re-derived from the tokens).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace futr::runtime {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // The sequence grew by `token`.
  virtual void push(int32_t token) = 0;
  void push(std::span<const int32_t> tokens) {
    for (int32_t t : tokens) push(t);
  }
  // Keeps the first `len` tokens (0 <= len <= size()).
  virtual void truncate(int64_t len) = 0;
  virtual int64_t size() const = 0;
  // Replaces `out` by up to `max_tokens` tokens proposed to follow the
  // sequence (empty: no proposal).
  virtual void draft(int max_tokens, std::vector<int32_t>& out) = 0;
  // The last non-empty proposal: `drafted` tokens, of which the first
  // `accepted` were what the target model produced.
  virtual void observe(int drafted, int accepted) {
    (void)drafted;
    (void)accepted;
  }
  // The cost of a verification step of r rows counts as step_rows(r) rows
  // (Engine::step_rows); a drafter may lengthen its proposals to fill them.
  virtual void set_step_rows(std::function<int(int)> step_rows) { (void)step_rows; }
};

struct NgramDrafterConfig {
  int draft_max = 8;  // tokens per proposal at most (1..64)
  int ngram_max = 3;  // longest n-gram matched (1..3)
  int ngram_min = 1;  // shortest n-gram matched (1..ngram_max)
};

class NgramDrafter final : public Drafter {
 public:
  static constexpr int kMaxNgram = 3;
  static constexpr int kMaxDraft = 64;
  static constexpr int kLongRun = kMaxNgram + 1;  // a run of this many tokens resets k to draft_max
  // futr::Error naming the field for a configuration out of range.
  explicit NgramDrafter(const NgramDrafterConfig& config = {});

  using Drafter::push;
  void push(int32_t token) override;
  void truncate(int64_t len) override;
  int64_t size() const override { return int64_t(tokens_.size()); }
  void draft(int max_tokens, std::vector<int32_t>& out) override;
  void observe(int drafted, int accepted) override;
  // Sizes each proposal to the step it runs in: the adaptive k becomes
  // step_rows(k + 1) - 1 where that is within max_tokens and draft_max, else
  // the longest r <= k whose step is not padded (step_rows(r + 1) == r + 1).
  void set_step_rows(std::function<int(int)> step_rows) override { step_rows_ = std::move(step_rows); }

  int current_k() const { return k_; }  // the adaptive draft length now
  // The run m of the last draft()'s proposal (0: none).
  int last_match() const { return last_match_; }
  // Whether the next draft() would continue the copy pointer: its source
  // position (-1: no pointer).
  int64_t pointer() const { return ptr_m_ > 0 ? ptr_q_ : -1; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const NgramDrafterConfig& config() const { return config_; }

 private:
  static constexpr int32_t kNotIndexed = -2;  // prev[] of a position whose n-gram has a token >= 2^21
  static constexpr int32_t kNone = -1;        // prev[] of a first occurrence
  // The key of t[end - n, end); false if a token does not fit 21 bits.
  bool key_of(int64_t end, int n, uint64_t& key) const;

  NgramDrafterConfig config_;
  std::function<int(int)> step_rows_;  // set_step_rows (empty: a step costs its rows)
  int k_ = 0;
  int last_match_ = 0;
  bool last_first_accepted_ = true;  // the last proposal's first token was accepted (none yet: true)
  int64_t ptr_q_ = 0;                // the copy pointer's source position (ptr_m_ > 0)
  int64_t ptr_m_ = 0;                // its run (0: no pointer)
  std::vector<int32_t> tokens_;
  // [n - 1]: n-gram key -> most recent follower position p (t[p-n, p) == the n-gram).
  std::array<std::unordered_map<uint64_t, int32_t>, kMaxNgram> head_;
  // [n - 1][p]: the previous follower of the n-gram before p (kNone, kNotIndexed).
  std::array<std::vector<int32_t>, kMaxNgram> prev_;
};

}  // namespace futr::runtime
