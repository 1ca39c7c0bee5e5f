// A Qwen2-style model from any Llama one: the architecture marked qwen2 and
// every layer given q/k/v projection biases ~ N(0, rms^2), fresh random values
// (support/random.h). The GPU tests run the real SmolLM2 weights this way
// against the CPU engine: an engine that dropped or misplaced the biases
// moves the logits far beyond the reference's own spread.
#pragma once

#include <random>

#include "model/model.h"
#include "support/random.h"

namespace futr::test {

inline void add_random_qkv_biases(Model& m, float rms) {
  m.config.arch = "qwen2";
  m.config.qkv_bias = true;
  std::normal_distribution<float> nd(0.f, rms);
  for (LayerWeights& L : m.weights.layers) {
    L.bq = Tensor({int64_t(m.config.q_dim())});
    L.bk = Tensor({int64_t(m.config.kv_dim())});
    L.bv = Tensor({int64_t(m.config.kv_dim())});
    for (Tensor* t : {&L.bq, &L.bk, &L.bv})
      for (float& x : t->data) x = nd(rng());
  }
}

}  // namespace futr::test
