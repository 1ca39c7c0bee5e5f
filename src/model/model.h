// Model: the one in-memory description of a Llama-style model, whatever file
// it came from (formats/*: GGUF, Hugging Face safetensors directory, .futr).
//
// Weights are FP32, dequantized on load, in canonical form:
//   - linear weights [out_features, in_features], y = x W^T;
//   - Q and K rows in the Hugging Face "rotate_half" RoPE order: within a head,
//     dimension i pairs with i + head_dim/2 (GGUF's interleaved order is undone
//     by the GGUF reader);
//   - tok_embd [vocab, hidden]; lm_head empty when the embedding is tied;
//     vocab may exceed the tokenizer's vocabulary (padded rows, never sampled).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "tokenizer/spec.h"

namespace futr {

struct LayerWeights {
  Tensor attn_norm;  // [hidden]
  Tensor wq;         // [n_heads*head_dim, hidden]
  Tensor wk;         // [n_kv_heads*head_dim, hidden]
  Tensor wv;         // [n_kv_heads*head_dim, hidden]
  Tensor bq;         // [n_heads*head_dim] q bias (qwen2); empty: none
  Tensor bk;         // [n_kv_heads*head_dim] k bias (qwen2); empty: none
  Tensor bv;         // [n_kv_heads*head_dim] v bias (qwen2); empty: none
  Tensor wo;         // [hidden, n_heads*head_dim]
  Tensor ffn_norm;   // [hidden]
  Tensor w_gate;     // [intermediate, hidden]
  Tensor w_up;       // [intermediate, hidden]
  Tensor w_down;     // [hidden, intermediate]
};

struct ModelWeights {
  Tensor tok_embd;                   // [vocab, hidden]
  std::vector<LayerWeights> layers;  // [n_layers]
  Tensor out_norm;                   // [hidden]
  Tensor lm_head;                    // [vocab, hidden]; empty when tied to tok_embd

  const Tensor& output() const { return lm_head.empty() ? tok_embd : lm_head; }
};

// What the source file held for one tensor (for `futr info` and reports).
struct SourceTensor {
  std::string name;            // name in the file
  std::string type;            // "F32", "BF16", "Q4_1", ...
  std::vector<int64_t> shape;  // canonical order (outermost first)
  uint64_t bytes = 0;          // bytes in the file
};

struct Model {
  ModelConfig config;
  TokenizerSpec tokenizer;
  ModelWeights weights;
  std::string path;                   // file or directory it was loaded from
  std::string format;                 // "gguf" | "hf-safetensors" | "futr"
  std::vector<SourceTensor> sources;  // tensors as stored in the file

  int64_t parameter_count() const;
  // Ids that can be generated: [0, sampleable_vocab()), the tokenizer's
  // vocabulary where it is known and smaller than config.vocab (an LM head
  // padded with rows no token has), else config.vocab. Engines mask the rest
  // when they sample (runtime/sampler.h).
  int32_t sampleable_vocab() const;
};

}  // namespace futr
