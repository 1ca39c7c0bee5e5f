// ModelConfig: the architecture hyper-parameters of a Llama-style model, the
// same whatever file it was read from (GGUF keys, config.json, .futr header).
#pragma once

#include <cstdint>
#include <string>

namespace futr {

// Llama 3.1 "llama3" RoPE frequency scaling (rope_scaling in config.json).
struct RopeScaling {
  std::string type = "none";      // "none" | "llama3"
  float factor = 1.0f;            // e.g. 8.0 for Llama-3.1
  float low_freq_factor = 1.0f;   // e.g. 1.0
  float high_freq_factor = 4.0f;  // e.g. 4.0
  int original_max_position = 8192;
};

// For messages: what runs and what does not (docs/MODELS.md).
inline constexpr const char* kSupportedArchitectures =
    "supported: llama (Llama 2/3, TinyLlama, Mistral 7B (v0.1 within its 4096-token window), SmolLM) and "
    "qwen2 "
    "(Qwen2, Qwen2.5); not supported: gemma, phi, mixture-of-experts models (mixtral, qwen2moe), "
    "sliding-window attention";

struct ModelConfig {
  std::string arch = "llama";  // "llama" | "qwen2" (Llama with biases on q, k and v)
  std::string name;            // human-readable, from the file's metadata
  int hidden = 0;              // d_model
  int n_layers = 0;
  int n_heads = 0;       // query heads
  int n_kv_heads = 0;    // key/value heads (GQA: n_heads % n_kv_heads == 0)
  int head_dim = 0;      // usually hidden / n_heads
  int intermediate = 0;  // SwiGLU inner width
  int vocab = 0;
  int max_context = 0;  // trained context length
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // LM head shares tok_embd
  bool qkv_bias = false;         // q, k and v projections add a bias (qwen2)

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Throws futr::Error naming the bad field if the config is inconsistent.
  void validate(const std::string& source) const;
};

}  // namespace futr
