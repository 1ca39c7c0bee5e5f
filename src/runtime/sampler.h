// Next-token sampling from a row of logits z[vocab].
//
//   temperature == 0:  greedy, argmax_i z_i (the lowest id among ties).
//   temperature  > 0:  1. keep the top_k largest logits (top_k <= 0: all),
//                      2. p_i = softmax(z_i / temperature) over the kept ids,
//                      3. nucleus: keep the smallest set of most probable ids
//                         whose probabilities sum to >= top_p (at least one;
//                         top_p >= 1 keeps all), renormalize,
//                      4. draw u ~ U[0, 1) from the seeded generator and
//                         return the first id whose cumulative probability
//                         exceeds u (ids in descending probability, ties by id).
//
// The generator is std::mt19937_64 with u = (bits >> 11) * 2^-53, so a seed
// gives the same tokens on every platform (std:: distributions are
// implementation-defined and are not used).
//
// Each open sequence of an Engine has its own Sampler (Engine::open), used by
// the RowOutput::kToken rows of a step.
//
// Tests: tests/runtime/sampler_test.cpp.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace futr::runtime {

struct SamplerConfig {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 40;            // <= 0: no top-k cut
  float top_p = 0.95f;       // (0, 1]; 1: no nucleus cut
  uint64_t seed = 0;         // generator seed
};

class Sampler {
 public:
  // Throws futr::Error for a negative temperature or top_p outside (0, 1].
  explicit Sampler(const SamplerConfig& config);
  // One draw from logits[vocab] (finite or -inf; at least one finite).
  int32_t sample(std::span<const float> logits);
  const SamplerConfig& config() const { return config_; }

  // The distribution sample() draws from after steps 1-3, as (id, p) in
  // descending probability (exposed for tests).
  std::vector<std::pair<int32_t, double>> distribution(std::span<const float> logits) const;

 private:
  double uniform();  // [0, 1)
  SamplerConfig config_;
  std::mt19937_64 rng_;
};

// argmax_i z_i, lowest index among ties; throws on an empty row.
int32_t argmax(std::span<const float> logits);

}  // namespace futr::runtime
