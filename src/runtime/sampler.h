// Next-token sampling from a row of logits z[vocab], and stop strings.
//
// One draw (sample()), in this order:
//   0. penalties over the sequence's recent history (accept() records it; the
//      last `penalty_last_n` tokens, 0 = all of it), on a copy of z:
//        repetition (CTRL, Keskar et al. 2019; HF transformers' rule): every id
//          in the window, prompt tokens included: z /= r if z > 0, else z *= r;
//        presence and frequency (OpenAI's definitions): every id generated in
//          the window: z -= presence + frequency * count(id);
//   temperature == 0:  greedy, argmax_i z_i (the lowest id among ties).
//   temperature  > 0:  1. keep the top_k largest logits (top_k <= 0: all),
//                      2. p_i = softmax(z_i / temperature) over the kept ids,
//                      3. min-p: drop ids with p_i < min_p * max_j p_j (min_p = 0: none),
//                      4. nucleus: keep the smallest set of most probable ids
//                         whose probabilities sum to >= top_p (at least one;
//                         top_p >= 1 keeps all), renormalize,
//                      5. draw u ~ U[0, 1) from the seeded generator and
//                         return the first id whose cumulative probability
//                         exceeds u (ids in descending probability, ties by id).
//
// Ranges (validate_sampler_config(), also what the server checks a request
// against; the message names the field and the range):
//   temperature [0, 100], top_p (0, 1], min_p [0, 1], repetition_penalty
//   (0, 10] (1 = off), presence_penalty and frequency_penalty [-2, 2] (0 = off),
//   penalty_last_n [0, 1048576], stop: at most 16 strings of 1..256 bytes.
//
// What can be drawn: ids [0, limit) where limit_vocab() set one (a vocabulary
// padded beyond the tokenizer: the LM head has rows for ids no token has; the
// engines set the limit from the model's tokenizer), else the whole row. The
// ids beyond it are masked (never drawn, never counted in the distribution).
// Logits are checked before every draw: a NaN or +inf among the drawable ids,
// or no finite one, is a futr::Error naming the id (never a silent token 0).
//
// The generator is std::mt19937_64 with u = (bits >> 11) * 2^-53, so a seed
// gives the same tokens on every platform (std:: distributions are
// implementation-defined and are not used).
//
// StopMatcher finds the stop strings in the streamed text: text that could
// still be the start of a stop string is held back until it is not; at a
// match, the text before it is released and the stream ends (the stop string
// itself is not output, as in OpenAI's API).
//
// Each open sequence of an Engine has its own Sampler (Engine::open), used by
// the RowOutput::kToken rows of a step.
//
// Tests: tests/runtime/sampler_test.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace futr::runtime {

struct SamplerConfig {
  float temperature = 0.0f;         // 0: greedy
  int top_k = 40;                   // <= 0: no top-k cut
  float top_p = 0.95f;              // (0, 1]; 1: no nucleus cut
  uint64_t seed = 0;                // generator seed
  float min_p = 0.0f;               // [0, 1]; 0: no min-p cut
  float repetition_penalty = 1.0f;  // (0, 10]; 1: off
  float presence_penalty = 0.0f;    // [-2, 2]; 0: off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0: off
  int penalty_last_n = 64;          // [0, 2^20] tokens of history penalized; 0: all
  std::vector<std::string> stop{};  // <= 16 strings of 1..256 bytes; generation ends before one
};

// Whether a sampler's draws depend on the sequence's history (a repetition,
// presence or frequency penalty): its owner must feed it with accept(), which
// an engine's own sampler (Engine::open) is not.
bool uses_history(const SamplerConfig& c);

// Throws futr::Error naming the first field outside its range (and the range),
// spelled as the CLI flag (`--min-p`); `prefix` replaces "--" (the server: "").
void validate_sampler_config(const SamplerConfig& c, const std::string& prefix = "--");

class Sampler {
 public:
  // Throws futr::Error for any field out of range (validate_sampler_config).
  explicit Sampler(const SamplerConfig& config);
  // Ids >= n are never drawn (n <= 0: no limit; a limit beyond the row is the row).
  void limit_vocab(int32_t n) { vocab_limit_ = n; }
  int32_t vocab_limit() const { return vocab_limit_; }
  // One draw from logits[vocab]: the drawable ids must be finite or -inf, at
  // least one finite; futr::Error naming the id otherwise.
  int32_t sample(std::span<const float> logits);
  // Records a token of the sequence (prompt: generated = false) for the penalties.
  void accept(int32_t token, bool generated);
  // Forgets the history (a new conversation); the generator state is kept.
  void reset_history() { history_.clear(); }
  const SamplerConfig& config() const { return config_; }
  // True when the next sample() is argmax(logits) itself: temperature 0 and
  // no penalty applies (none configured, or no history yet). An engine may
  // then compute the draw where the logits are (the GPU engine's argmax)
  // without handing the row to sample().
  bool plain_greedy() const { return config_.temperature == 0.0f && !penalties_on(); }
  // True when an engine can make the next sample() itself from a uniform the
  // sampler hands it (next_uniform()): temperature > 0, no penalty applies,
  // and 1 <= top_k <= max_top_k (the GPU engine's sm90_sample_topk). The
  // engine's token must be sample_with(logits, u) for the same u.
  bool engine_drawable(int max_top_k) const {
    return config_.temperature > 0.0f && !penalties_on() && config_.top_k >= 1 && config_.top_k <= max_top_k;
  }
  // The uniform the next sample() would draw (advances the generator the same way).
  double next_uniform() { return uniform(); }
  // sample()'s draw for temperature > 0 with a given u in [0, 1) (the generator is not touched).
  int32_t sample_with(std::span<const float> logits, double u) const;

  // The distribution sample() draws from after steps 0-4, as (id, p) in
  // descending probability, over the drawable ids (exposed for tests).
  std::vector<std::pair<int32_t, double>> distribution(std::span<const float> logits) const;
  // The logits after step 0 (a copy; the input itself when no penalty applies).
  std::vector<float> penalized(std::span<const float> logits) const;

 private:
  bool penalties_on() const;
  // The drawable prefix of a row, checked (see sample()).
  std::span<const float> drawable(std::span<const float> logits) const;
  double uniform();  // [0, 1)
  // Step 5: the first id whose cumulative probability exceeds u (else the last).
  static int32_t pick(const std::vector<std::pair<int32_t, double>>& dist, double u);
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::deque<std::pair<int32_t, bool>> history_;  // (token, generated), oldest first, <= penalty_last_n
  int32_t vocab_limit_ = 0;                       // ids >= this are never drawn; <= 0: none
};

// Stop strings over a stream of text pieces.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `piece`; returns the text that can be shown now. After a stop string
  // is found, stopped() is true and the text before it was the last returned.
  std::string push(const std::string& piece);
  // The held-back text at the end of the stream (nothing after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text that may still begin a stop string
  bool stopped_ = false;
  std::string matched_;
};

// argmax_i z_i, lowest index among ties; throws on an empty row.
int32_t argmax(std::span<const float> logits);

}  // namespace futr::runtime
