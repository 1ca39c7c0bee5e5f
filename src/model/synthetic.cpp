// Synthetic model configurations and the tiny host model (see synthetic.h).
#include "model/synthetic.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/error.h"

namespace futr {

std::vector<std::string> synthetic_model_names() {
  return {"tiny", "smollm2-135m", "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"};
}

ModelConfig synthetic_config(const std::string& name) {
  ModelConfig c;
  c.name = "synthetic " + name;
  c.rms_eps = 1e-5f;
  auto llama3 = [&](int hidden, int layers, int heads, int head_dim, int inter, float factor, bool tied) {
    c.hidden = hidden;
    c.n_layers = layers;
    c.n_heads = heads;
    c.n_kv_heads = 8;
    c.head_dim = head_dim;
    c.intermediate = inter;
    c.vocab = 128256;
    c.max_context = 131072;
    c.rope_theta = 500000.0f;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = factor;
    c.rope_scaling.low_freq_factor = 1.0f;
    c.rope_scaling.high_freq_factor = 4.0f;
    c.rope_scaling.original_max_position = 8192;
    c.tied_embeddings = tied;
  };
  if (name == "tiny") {
    c.hidden = 256;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 64;
    c.intermediate = 512;
    c.vocab = 512;
    c.max_context = 4096;
    c.rope_theta = 10000.0f;
  } else if (name == "smollm2-135m") {  // SmolLM2-135M-Instruct's config.json
    c.hidden = 576;
    c.n_layers = 30;
    c.n_heads = 9;
    c.n_kv_heads = 3;
    c.head_dim = 64;
    c.intermediate = 1536;
    c.vocab = 49152;
    c.max_context = 8192;
    c.rope_theta = 100000.0f;
    c.tied_embeddings = true;
  } else if (name == "llama-3.2-1b") {
    llama3(2048, 16, 32, 64, 8192, 32.0f, true);
  } else if (name == "llama-3.1-8b") {
    llama3(4096, 32, 32, 128, 14336, 8.0f, false);
  } else if (name == "llama-3.1-70b") {
    llama3(8192, 80, 64, 128, 28672, 8.0f, false);
  } else if (name == "llama-3.1-405b") {  // ~203 GB in INT4: tensor parallel only (--tp 2 and more)
    llama3(16384, 126, 128, 128, 53248, 8.0f, false);
  } else {
    fail("--synthetic {}: unknown synthetic model (accepted: {})", name,
         fmt::join(synthetic_model_names(), ", "));
  }
  c.validate(c.name);
  return c;
}

Model synthetic_host_model(const std::string& name, uint64_t seed) {
  const ModelConfig c = synthetic_config(name);
  FUTR_CHECK(
      name == "tiny",
      "--synthetic {}: its random weights are generated on the GPU only (--backend gpu); on the CPU only "
      "--synthetic tiny exists (the CPU engines would need {:.1f} GB of FP32 weights on the host)",
      name,
      double(int64_t(c.n_layers) * (int64_t(c.q_dim() + 2 * c.kv_dim()) * c.hidden +
                                    int64_t(c.hidden) * c.q_dim() + 3 * int64_t(c.intermediate) * c.hidden) +
             2.0 * double(c.vocab) * c.hidden) *
          4e-9);
  std::mt19937_64 rng(seed);
  auto tensor = [&](std::vector<int64_t> shape, float mean, float stddev) {
    Tensor t(std::move(shape));
    std::normal_distribution<float> d(mean, stddev);
    for (float& v : t.data) v = d(rng);
    return t;
  };
  Model m;
  m.config = c;
  m.path = "synthetic:" + name;
  m.format = "synthetic";
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
  // Standard deviation 1/sqrt(K) per weight: y = x W^T keeps x's RMS.
  const float sh = 1.0f / std::sqrt(float(H)), sq = 1.0f / std::sqrt(float(Q)),
              si = 1.0f / std::sqrt(float(I));
  m.weights.tok_embd = tensor({c.vocab, H}, 0.0f, 1.0f);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = tensor({H}, 1.0f, 0.1f);
    L.ffn_norm = tensor({H}, 1.0f, 0.1f);
    L.wq = tensor({Q, H}, 0.0f, sh);
    L.wk = tensor({KV, H}, 0.0f, sh);
    L.wv = tensor({KV, H}, 0.0f, sh);
    L.wo = tensor({H, Q}, 0.0f, sq);
    L.w_gate = tensor({I, H}, 0.0f, sh);
    L.w_up = tensor({I, H}, 0.0f, sh);
    L.w_down = tensor({H, I}, 0.0f, si);
    m.weights.layers.push_back(std::move(L));
  }
  m.weights.out_norm = tensor({H}, 1.0f, 0.1f);
  m.weights.lm_head = tensor({c.vocab, H}, 0.0f, sh);
  return m;
}

}  // namespace futr
