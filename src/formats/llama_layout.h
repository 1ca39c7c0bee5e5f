// The tensors a Llama model consists of ("slots"), their canonical shapes as
// implied by a ModelConfig, and the completeness/shape check shared by every
// reader. Each reader maps its own tensor names onto slots (GGUF "blk.3.attn_q
// .weight", Hugging Face "model.layers.3.self_attn.q_proj.weight", ...).
//
//   slot        shape                         per layer
//   tok_embd    [vocab, hidden]               no
//   attn_norm   [hidden]                      yes
//   wq          [n_heads*head_dim, hidden]    yes
//   wk, wv      [n_kv_heads*head_dim, hidden] yes
//   wo          [hidden, n_heads*head_dim]    yes
//   ffn_norm    [hidden]                      yes
//   w_gate/w_up [intermediate, hidden]        yes
//   w_down      [hidden, intermediate]        yes
//   out_norm    [hidden]                      no
//   lm_head     [vocab, hidden]               no (optional: absent = tied)
//   bq          [n_heads*head_dim]            yes (qwen2 only)
//   bk, bv      [n_kv_heads*head_dim]         yes (qwen2 only)
//
// Tested through the readers (tests/formats/*).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/model.h"

namespace futr {

enum class LlamaSlot : uint8_t {
  kTokEmbd,
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kFfnNorm,
  kGate,
  kUp,
  kDown,
  kOutNorm,
  kLmHead,
  kBq,
  kBk,
  kBv,  // q/k/v biases: required with ModelConfig::qkv_bias (qwen2), refused without
};

struct SlotRef {
  LlamaSlot slot = LlamaSlot::kTokEmbd;
  int layer = -1;  // 0..n_layers-1 for per-layer slots, -1 otherwise
};

const char* slot_name(LlamaSlot s);  // "wq", ...
bool slot_per_layer(LlamaSlot s);
std::vector<int64_t> slot_shape(const ModelConfig& c, LlamaSlot s);
// The weight tensor a slot refers to; `w.layers` must already have n_layers entries.
Tensor& slot_tensor(ModelWeights& w, const SlotRef& ref);

std::string shape_string(const std::vector<int64_t>& shape);

// One tensor of a file, mapped to its slot.
struct SlotTensor {
  SlotRef ref;                 // where it goes
  std::string name;            // name in the file
  std::vector<int64_t> shape;  // canonical shape as stored
};

// Checks that each slot is filled at most once, that every required slot of
// `c` is present (lm_head is optional), that layers are < c.n_layers, and that
// each shape equals slot_shape(). Errors name `source`, the tensor and, for
// shapes, where the config came from (`config_from`, e.g. "llama.* keys").
// Returns whether lm_head is present.
// `name_of` gives a slot's tensor name in the file's convention (for "missing" errors).
bool check_llama_layout(const ModelConfig& c, const std::vector<SlotTensor>& tensors,
                        const std::string& source, const std::string& config_from,
                        const std::function<std::string(const SlotRef&)>& name_of);

// Parses the decimal layer index at the start of `s` (digits only, < 1e6);
// returns -1 if `s` does not start with one. `rest` receives the remainder.
int parse_layer_index(std::string_view s, std::string_view& rest);

}  // namespace futr
