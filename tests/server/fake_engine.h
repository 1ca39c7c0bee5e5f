// A small deterministic Engine for the scheduler and HTTP tests: no model,
// the Engine contract checked on every call (a scheduler that breaks it gets
// a futr::Error, which the tests see as failed requests).
//
// The token "sampled" for a kToken row is a function of the sequence's whole
// history (every token stored plus the row's token) and its seed only:
//   h = FNV-1a over (seed, tokens),  token = words[h % words.size()],
// or the EOS id when eos_every > 0 and h % eos_every == 0. So a sequence gets
// the same tokens whatever else is in the batch, and any token fed out of
// order, lost or given to another sequence changes everything after it.
// A kLogits row gets logits that make that token the argmax: 1 for it, 0 for
// the other words, -100 for every other id (logits_for()); a kLogprob row
// gets log softmax of those logits at its target (-runtime::token_nll).
//
// Paging (Options::block_size > 0): the KV accounting of a paged engine with
// the real runtime::BlockPool (blocks taken as sequences grow, a step that
// needs more than are free refused before anything changes, full blocks
// indexed by their tokens, attach_prefix() restoring a cached prefix). The
// fake's "KV" is the token history itself, so an attached prefix is exactly
// the tokens the cache verified. Its draws depend on nothing but the history
// and the seed: sampler_state() has nothing to keep.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/kv_blocks.h"
#include "runtime/perplexity.h"

namespace futr::test {

class FakeEngine : public runtime::Engine {
 public:
  struct Options {
    int vocab = 1000;
    int ctx = 256;
    int max_seqs = 4;
    int max_step_tokens = 32;
    int64_t positions = 0;                   // KV positions in all; 0 = ctx * max_seqs
    std::vector<int32_t> words;              // tokens to draw from (not empty)
    int32_t eos = -1;                        // the EOS id (for eos_every)
    int eos_every = 0;                       // 0: never EOS
    std::chrono::microseconds step_time{0};  // sleep per step (a slow engine)
    std::chrono::microseconds row_time{0};   // and per row
    bool held = false;   // steps wait for release(): requests submitted meanwhile queue up
    int block_size = 0;  // > 0: a paged KV cache of `blocks` blocks of this many positions
    int64_t blocks = 0;  // paged: blocks in all; 0 = max_seqs * ceil(ctx / block_size)
  };

  explicit FakeEngine(Options o) : o_(std::move(o)) {
    info_.name = "fake";
    info_.describe = "fake engine (tests/server/fake_engine.h)";
    info_.vocab = o_.vocab;
    info_.ctx = o_.ctx;
    info_.max_seqs = o_.max_seqs;
    info_.max_step_tokens = o_.max_step_tokens;
    if (o_.positions == 0) o_.positions = int64_t(o_.ctx) * o_.max_seqs;
    held_ = o_.held;
    if (o_.block_size > 0) {
      if (o_.blocks == 0) o_.blocks = int64_t(o_.max_seqs) * ((o_.ctx + o_.block_size - 1) / o_.block_size);
      pool_ = std::make_unique<runtime::BlockPool>(o_.blocks, o_.block_size);
      info_.kv_block_size = o_.block_size;
      info_.kv_blocks = o_.blocks;
    }
  }

  // Lets the steps of a held engine run (Options::held).
  void release() {
    {
      std::lock_guard lock(gate_mutex_);
      held_ = false;
    }
    gate_.notify_all();
  }

  void open(runtime::SeqId id, const runtime::SamplerConfig& s = {}) override {
    FUTR_CHECK(!seqs_.count(id), "sequence {} is already open", id);
    FUTR_CHECK(int(seqs_.size()) < o_.max_seqs, "no free sequence ({} open)", seqs_.size());
    seqs_[id] = Seq{{}, s.seed, {}};
    ++opened_;
  }
  void truncate(runtime::SeqId id, int len) override {
    auto& s = get(id);
    FUTR_CHECK(len >= 0 && len <= int(s.tokens.size()), "bad truncate");
    s.tokens.resize(size_t(len));
    if (pool_) pool_->truncate(s.blocks, len);
  }
  void close(runtime::SeqId id) override {
    auto& s = get(id);
    if (pool_) pool_->release(s.blocks);
    seqs_.erase(id);
    ++closed_;
  }
  int64_t free_blocks() const override { return pool_ ? pool_->free_blocks() : 0; }
  int64_t blocks_needed(runtime::SeqId id, int n) const override {
    auto it = seqs_.find(id);
    FUTR_CHECK(it != seqs_.end(), "sequence {} is not open", id);
    return pool_ ? pool_->blocks_needed(it->second.blocks, n) : 0;
  }
  int attach_prefix(runtime::SeqId id, std::span<const int32_t> tokens) override {
    auto& s = get(id);
    if (!pool_) return 0;
    FUTR_CHECK(s.tokens.empty(), "a prefix attaches to an empty sequence");
    const int n = pool_->attach(s.blocks, tokens.first(std::min(tokens.size(), size_t(o_.ctx))));
    s.tokens = s.blocks.tokens;  // what the cache verified
    attached_ += n;
    return n;
  }
  bool is_open(runtime::SeqId id) const override { return seqs_.count(id) > 0; }
  int length(runtime::SeqId id) const override {
    auto it = seqs_.find(id);
    FUTR_CHECK(it != seqs_.end(), "sequence {} is not open", id);
    return int(it->second.tokens.size());
  }

  runtime::StepResult step(std::span<const runtime::BatchRow> rows) override {
    // The contract, checked before anything changes.
    FUTR_CHECK(!rows.empty() && int(rows.size()) <= o_.max_step_tokens, "{} rows (max {})", rows.size(),
               o_.max_step_tokens);
    std::set<runtime::SeqId> seen;
    std::map<runtime::SeqId, int> next;
    int64_t added = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      FUTR_CHECK(r.token >= 0 && r.token < o_.vocab, "row {}: token {} outside the vocabulary", i, r.token);
      const bool first = i == 0 || rows[i - 1].seq != r.seq;
      if (first) {
        FUTR_CHECK(!seen.count(r.seq), "row {}: sequence {} appears in two runs", i, r.seq);
        seen.insert(r.seq);
        next[r.seq] = length(r.seq);
      }
      FUTR_CHECK(r.pos == next[r.seq], "row {}: position {} of sequence {}, expected {}", i, r.pos, r.seq,
                 next[r.seq]);
      FUTR_CHECK(r.pos < o_.ctx, "row {}: sequence {} past the context", i, r.seq);
      FUTR_CHECK(r.out != runtime::RowOutput::kLogprob || (r.target >= 0 && r.target < o_.vocab),
                 "row {}: target {} outside the vocabulary", i, r.target);
      ++next[r.seq];
      ++added;
    }
    if (pool_) {
      int64_t need = 0;
      for (const auto& [id, n] : next) need += pool_->blocks_needed(seqs_[id].blocks, n - length(id));
      FUTR_CHECK(need <= pool_->free_blocks(), "out of KV blocks: {} needed, {} free", need,
                 pool_->free_blocks());
    } else {
      FUTR_CHECK(added <= free_positions(), "out of KV positions");
    }
    // Run.
    {
      std::unique_lock lock(gate_mutex_);
      gate_.wait(lock, [&] { return !held_; });
    }
    if (o_.step_time.count() || o_.row_time.count())
      std::this_thread::sleep_for(o_.step_time + o_.row_time * int64_t(rows.size()));
    runtime::StepResult out;
    int64_t n_logits = 0;
    for (const auto& r : rows) n_logits += r.out == runtime::RowOutput::kLogits ? 1 : 0;
    if (n_logits > 0) out.logits = Tensor({n_logits, int64_t(o_.vocab)});
    int64_t logit_row = 0;
    if (pool_)
      for (const auto& [id, n] : next) {
        auto& s = seqs_[id];
        std::optional<runtime::BlockCopy> copy;  // the fake's blocks hold no rows to copy
        FUTR_CHECK(pool_->grow(s.blocks, n - int(s.tokens.size()), &copy), "out of KV blocks");
      }
    for (const auto& r : rows) {
      auto& s = seqs_[r.seq];
      s.tokens.push_back(r.token);
      if (pool_) pool_->commit(s.blocks, std::span<const int32_t>(&r.token, 1));
      if (r.out == runtime::RowOutput::kToken) out.tokens.push_back(draw(s));
      if (r.out == runtime::RowOutput::kLogits) {
        const std::vector<float> z = logits_for(draw(s));
        std::copy(z.begin(), z.end(), out.logits.row(logit_row++));
      }
      if (r.out == runtime::RowOutput::kLogprob)
        out.logprobs.push_back(-runtime::token_nll(logits_for(draw(s)), r.target));
    }
    ++steps_;
    for (const auto& r : rows) ++rows_by_out_[size_t(r.out)];
    max_rows_ = std::max<int>(max_rows_, int(rows.size()));
    max_seqs_in_step_ = std::max<int>(max_seqs_in_step_, int(seen.size()));
    return out;
  }

  int64_t free_positions() const override {
    if (pool_) return pool_->free_blocks() * o_.block_size;
    int64_t used = 0;
    for (const auto& [id, s] : seqs_) used += int64_t(s.tokens.size());
    return o_.positions - used;
  }
  int free_sequences() const override { return o_.max_seqs - int(seqs_.size()); }
  const runtime::EngineInfo& info() const override { return info_; }
  nlohmann::json stats() const override { return {{"open", seqs_.size()}}; }

  // What the tokens of a sequence with `seed` and `history` (prompt +
  // generated so far) would be: the reference the tests compare with.
  int32_t draw_for(uint64_t seed, std::span<const int32_t> history) const {
    Seq s{{history.begin(), history.end()}, seed, {}};
    return draw(s);
  }

  // The logits of a kLogits row whose kToken draw would be `token`.
  std::vector<float> logits_for(int32_t token) const {
    std::vector<float> z(size_t(o_.vocab), -100.0f);
    for (int32_t w : o_.words) z[size_t(w)] = 0.0f;
    z[size_t(token)] = 1.0f;
    return z;
  }

  // Statistics (read them when the scheduler is idle).
  int steps() const { return steps_; }
  int max_rows() const { return max_rows_; }
  int max_seqs_in_step() const { return max_seqs_in_step_; }
  int opened() const { return opened_; }
  int closed() const { return closed_; }
  int open_now() const { return int(seqs_.size()); }
  int64_t rows_with(runtime::RowOutput out) const { return rows_by_out_[size_t(out)]; }
  const runtime::BlockPool* pool() const { return pool_.get(); }  // paged only
  int64_t attached() const { return attached_; }                  // positions attach_prefix() gave

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    uint64_t seed = 0;
    runtime::SequenceBlocks blocks;  // paged
  };
  Seq& get(runtime::SeqId id) {
    auto it = seqs_.find(id);
    FUTR_CHECK(it != seqs_.end(), "sequence {} is not open", id);
    return it->second;
  }
  int32_t draw(const Seq& s) const {
    uint64_t h = 1469598103934665603ull ^ s.seed;
    for (int32_t t : s.tokens) h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
    h ^= h >> 29;
    if (o_.eos_every > 0 && h % uint64_t(o_.eos_every) == 0) return o_.eos;
    return o_.words[(h / 7) % o_.words.size()];
  }

  Options o_;
  runtime::EngineInfo info_;
  std::map<runtime::SeqId, Seq> seqs_;
  std::unique_ptr<runtime::BlockPool> pool_;  // paged only
  int64_t attached_ = 0;
  int steps_ = 0, max_rows_ = 0, max_seqs_in_step_ = 0, opened_ = 0, closed_ = 0;
  std::array<int64_t, 4> rows_by_out_{};  // rows run, by RowOutput
  std::mutex gate_mutex_;
  std::condition_variable gate_;
  bool held_ = false;
};

}  // namespace futr::test
