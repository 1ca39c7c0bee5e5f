// A Qwen2-style model from any Llama one: the architecture marked qwen2 and
// every layer given q/k/v projection biases ~ N(0, rms^2), drawn from a
// generator seeded with `seed` (the same biases every run: with biases this
// large the model is chaotic enough that its GPU-vs-CPU agreement varies a
// lot from one draw to the next, so a test on fresh draws would be flaky).
// The GPU tests run the real SmolLM2 weights this way against the CPU
// engine: an engine that dropped or misplaced the biases moves the logits far
// beyond the reference's own spread.
#pragma once

#include <random>

#include "model/model.h"
#include "support/random.h"

namespace futr::test {

inline void add_random_qkv_biases(Model& m, float rms, uint64_t seed) {
  m.config.arch = "qwen2";
  m.config.qkv_bias = true;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.f, rms);
  for (LayerWeights& L : m.weights.layers) {
    L.bq = Tensor({int64_t(m.config.q_dim())});
    L.bk = Tensor({int64_t(m.config.kv_dim())});
    L.bv = Tensor({int64_t(m.config.kv_dim())});
    for (Tensor* t : {&L.bq, &L.bk, &L.bv})
      for (float& x : t->data) x = nd(gen);
  }
}

}  // namespace futr::test
