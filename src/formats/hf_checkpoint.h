// Hugging Face checkpoint directory reader (LlamaForCausalLM).
//
//   dir/config.json                     architecture and hyper-parameters (below)
//   dir/model.safetensors               weights, or
//   dir/model.safetensors.index.json    {"weight_map": {tensor: shard file}} + the shards
//   dir/tokenizer.json (optional)       via tokenizer_spec_from_hf_json (futr_tokenizer);
//                                       absent: an empty TokenizerSpec (tokens empty)
//
// config.json keys: architectures (must contain LlamaForCausalLM) and/or
// model_type ("llama"); hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size, vocab_size (required); num_key_value_heads (default: heads),
// head_dim (default hidden/heads), rms_norm_eps (1e-6), max_position_embeddings
// (2048), tie_word_embeddings (false; a missing lm_head.weight also means tied),
// hidden_act must be "silu", attention_bias/mlp_bias must be false.
// RoPE, both spellings:
//   transformers v4: "rope_theta": 500000.0, "rope_scaling": {"rope_type" | "type": "llama3",
//                    "factor", "low_freq_factor", "high_freq_factor",
//                    "original_max_position_embeddings"}  (null: no scaling)
//   transformers v5: "rope_parameters": {"rope_theta", "rope_type": "default" | "llama3", ...}
// rope_parameters wins over rope_scaling; its rope_theta over the top-level one.
//
// Tensor names: model.embed_tokens.weight, model.layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}
// .weight, model.norm.weight, lm_head.weight; *.rotary_emb.inv_freq buffers are
// ignored; any other tensor is an error.
//
// Hostile input: config.json is limited to 4 MB and the index to 64 MB; shard
// names must be plain file names inside the directory; the index must agree
// with the shards; see safetensors.h for the files themselves.
//
// Tests: tests/formats/hf_checkpoint_test.cpp (tests/data/hf_tiny/*, made by
// transformers, plus broken variants written by the test); fuzz/hf_config_fuzz.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace futr {

// Parses the text of a config.json (`source` names it in errors). Not validated.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& source);

// dir/config.json, parsed and validated.
ModelConfig read_hf_config(const std::filesystem::path& dir);

// The safetensors files holding the weights (model.safetensors, or the shards
// the index names, each once, in index order).
std::vector<std::filesystem::path> hf_weight_files(const std::filesystem::path& dir);

// The model (config validated, sources filled, shapes checked); FP32 weights
// when `with_weights`, otherwise no tensor data is read.
Model load_hf_model(const std::filesystem::path& dir, bool with_weights = true);

}  // namespace futr
