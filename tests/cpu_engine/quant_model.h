// A small random Llama whose projection shapes fit the INT4 format (K a
// multiple of 64, with both group sizes: hidden 128 -> g128, intermediate 192
// -> g64), for the quantized-reference tests.
#pragma once

#include "cpu_engine/tiny_model.h"

namespace futr::test {

inline ModelConfig quant_config() {
  ModelConfig c;
  c.name = "tiny-quant";
  c.hidden = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate = 192;
  c.vocab = 101;
  c.max_context = 128;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = true;
  return c;
}

}  // namespace futr::test
