// KL divergence and top-1 agreement of a quantized model against a saved base
// run (`futr perplexity --save-kl-base FILE` / `--kl-base FILE`).
//
// Storing the base model's full distribution (49152 log-probabilities per
// token, 60 GB for 300k tokens) is not possible, so per scored token the base
// file keeps a coarsened distribution: the k most likely tokens T (ids and
// log-probabilities) and the remaining mass p_R = 1 - sum_{i in T} p_i. The
// quantized run's distribution q is coarsened on the same partition
// {t_1}, ..., {t_k}, R, and
//     KL_k(P || Q) = sum_{i in T} p_i log(p_i / q_i) + p_R log(p_R / q_R)
// This is a LOWER BOUND of the true KL(P || Q) (data-processing inequality: a
// coarsening is a deterministic map, which cannot increase a divergence) and it
// converges to it as k grows; with k = 32 on SmolLM2 the base keeps most of
// the mass in T (docs/ACCURACY.md gives the measured gap against k = 1024).
//
// Top-1 agreement: argmax_j q_j == argmax_j p_j (ties: lowest id; the base's
// argmax is T's first entry). Perplexity delta: both runs score the same
// targets; the base file stores each target's NLL, so the mean NLL difference
// and its paired standard error are exact.
//
// Base file (little-endian):
//   "FUTRKLB\0"  u32 version = 1  u32 k  u32 vocab  u32 reserved
//   u64 entries  u64 json_bytes  json (meta: model, text, ctx, stride, ...)
//   entries x { i32 target, f32 nll, i32 ids[k], f32 logp[k], f32 log_rest }
// Entries are in scoring order (runtime/perplexity.h windows).
//
// Tests: tests/quant/kl_test.cpp (against a brute-force KL on small vocabularies).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace futr::quant {

struct KlEntry {
  int32_t target = 0;        // token scored
  float nll = 0.0f;          // -log p(target)
  std::vector<int32_t> ids;  // [k] most likely tokens, by decreasing probability
  std::vector<float> logp;   // [k] their log-probabilities
  float log_rest = 0.0f;     // log of the remaining mass (-inf if none)
};

// The coarsened base distribution of one row of logits (double precision).
KlEntry make_kl_entry(std::span<const float> logits, int32_t target, int k);

struct KlRow {
  double kl = 0.0;    // KL_k(P || Q) of the row
  bool top1 = false;  // argmax q == argmax p
  double nll = 0.0;   // -log q(target)
};
// Compares one row of the quantized run's logits with the base entry.
KlRow compare_kl_row(const KlEntry& base, std::span<const float> logits);

class KlBase {
 public:
  KlBase() = default;
  KlBase(int k, int vocab) : k_(k), vocab_(vocab) {}
  // Appends rows [0, rows) of logits ([rows, vocab] row-major) with their targets.
  void add_rows(const float* logits, int rows, int vocab, const int32_t* targets);
  void write(const std::string& path, const nlohmann::json& meta) const;
  // futr::Error naming the file on a bad magic, version, truncation or sizes.
  static KlBase read(const std::string& path);

  int k() const { return k_; }
  int vocab() const { return vocab_; }
  int64_t size() const { return int64_t(entries_.size()); }
  const KlEntry& entry(int64_t i) const { return entries_[size_t(i)]; }
  const nlohmann::json& meta() const { return meta_; }

 private:
  int k_ = 32;
  int vocab_ = 0;
  std::vector<KlEntry> entries_;
  nlohmann::json meta_;
};

// Running comparison of a quantized run against a KlBase.
class KlCompare {
 public:
  explicit KlCompare(const KlBase& base) : base_(base) {}
  // The next `rows` scored rows of the run (in scoring order).
  void add_rows(const float* logits, int rows, int vocab, const int32_t* targets);
  int64_t count() const { return n_; }
  double mean_kl() const { return n_ ? kl_sum_ / double(n_) : 0.0; }
  double kl_stderr() const;
  double top1() const { return n_ ? double(top1_) / double(n_) : 0.0; }
  double mean_nll_delta() const { return n_ ? d_sum_ / double(n_) : 0.0; }  // mean(nll_q - nll_base)
  double nll_delta_stderr() const;
  double base_mean_nll() const { return n_ ? base_nll_sum_ / double(n_) : 0.0; }
  double mean_nll() const { return n_ ? nll_sum_ / double(n_) : 0.0; }

 private:
  const KlBase& base_;
  int64_t n_ = 0, top1_ = 0;
  double kl_sum_ = 0, kl_sq_ = 0, d_sum_ = 0, d_sq_ = 0, base_nll_sum_ = 0, nll_sum_ = 0;
};

}  // namespace futr::quant
