// Hugging Face checkpoint directory reader: see hf_checkpoint.h.
#include "formats/hf_checkpoint.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "core/text.h"
#include "formats/llama_layout.h"
#include "formats/safetensors.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxConfigBytes = 4u << 20;
constexpr uint64_t kMaxIndexBytes = 64u << 20;

std::string read_small_file(const fs::path& p, uint64_t limit) {
  return read_file_limited(p, limit, "a Hugging Face checkpoint file");
}

json parse_json(std::string_view text, const std::string& source) {
  json j = parse_json_document(text, source);
  FUTR_CHECK(j.is_object(), "{}: expected a JSON object at the top level", source);
  return j;
}

// Field access with type checks; null counts as absent (transformers writes
// "head_dim": null and "rope_scaling": null).
const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// File-derived text in messages: clipped and escaped (core/text.h).
std::string clip(const std::string& s) { return printable(s, 100); }

std::optional<int> opt_int(const json& o, const char* key, const std::string& src) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  FUTR_CHECK(v->is_number_integer(), "{}: '{}' must be an integer, found {}", src, key, json_snippet(*v));
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    FUTR_CHECK(u <= uint64_t(INT32_MAX), "{}: '{}' = {} is out of range", src, key, u);
    return int(u);
  }
  const int64_t x = v->get<int64_t>();
  FUTR_CHECK(x >= 0 && x <= INT32_MAX, "{}: '{}' = {} is out of range", src, key, x);
  return int(x);
}

int req_int(const json& o, const char* key, const std::string& src) {
  const std::optional<int> v = opt_int(o, key, src);
  FUTR_CHECK(v.has_value(), "{}: missing '{}'", src, key);
  return *v;
}

std::optional<float> opt_float(const json& o, const char* key, const std::string& src) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  FUTR_CHECK(v->is_number(), "{}: '{}' must be a number, found {}", src, key, json_snippet(*v));
  const double x = v->get<double>();
  FUTR_CHECK(std::isfinite(x) && std::fabs(x) <= double(FLT_MAX), "{}: '{}' = {} is out of range", src, key,
             x);
  return float(x);
}

std::optional<bool> opt_bool(const json& o, const char* key, const std::string& src) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  FUTR_CHECK(v->is_boolean(), "{}: '{}' must be true or false, found {}", src, key, json_snippet(*v));
  return v->get<bool>();
}

std::optional<std::string> opt_string(const json& o, const char* key, const std::string& src) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  FUTR_CHECK(v->is_string(), "{}: '{}' must be a string, found {}", src, key, json_snippet(*v));
  return v->get<std::string>();
}

// RoPE parameters (rope_parameters or rope_scaling object) -> config fields.
void read_rope(const json& r, const char* what, ModelConfig& c, const std::string& src) {
  FUTR_CHECK(r.is_object(), "{}: '{}' must be an object, found {}", src, what, json_snippet(r));
  const std::string s = src + " " + what;
  if (auto t = opt_float(r, "rope_theta", s)) c.rope_theta = *t;
  std::optional<std::string> type = opt_string(r, "rope_type", s);
  if (!type) type = opt_string(r, "type", s);
  FUTR_CHECK(type.has_value(), "{}: no 'rope_type' (or 'type')", s);
  if (*type == "default") {
    c.rope_scaling = RopeScaling{};
    return;
  }
  c.rope_scaling.type = clip(*type);  // validate() rejects all but llama3, naming it
  if (*type != "llama3") return;
  auto need = [&](const char* k) {
    const std::optional<float> v = opt_float(r, k, s);
    FUTR_CHECK(v.has_value(), "{}: llama3 scaling needs '{}'", s, k);
    return *v;
  };
  c.rope_scaling.factor = need("factor");
  c.rope_scaling.low_freq_factor = need("low_freq_factor");
  c.rope_scaling.high_freq_factor = need("high_freq_factor");
  const std::optional<int> orig = opt_int(r, "original_max_position_embeddings", s);
  FUTR_CHECK(orig.has_value(), "{}: llama3 scaling needs 'original_max_position_embeddings'", s);
  c.rope_scaling.original_max_position = *orig;
  FUTR_CHECK(c.rope_scaling.factor >= 1 && c.rope_scaling.low_freq_factor > 0 &&
                 c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor &&
                 c.rope_scaling.original_max_position > 0,
             "{}: llama3 scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
             "original_max_position_embeddings > 0",
             s);
}

std::optional<SlotRef> hf_slot(std::string_view name) {
  if (name == "model.embed_tokens.weight") return SlotRef{LlamaSlot::kTokEmbd, -1};
  if (name == "model.norm.weight") return SlotRef{LlamaSlot::kOutNorm, -1};
  if (name == "lm_head.weight") return SlotRef{LlamaSlot::kLmHead, -1};
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  std::string_view rest;
  const int layer = parse_layer_index(name.substr(kPrefix.size()), rest);
  if (layer < 0) return std::nullopt;
  static constexpr std::pair<std::string_view, LlamaSlot> kNames[] = {
      {".input_layernorm.weight", LlamaSlot::kAttnNorm},
      {".self_attn.q_proj.weight", LlamaSlot::kWq},
      {".self_attn.k_proj.weight", LlamaSlot::kWk},
      {".self_attn.v_proj.weight", LlamaSlot::kWv},
      {".self_attn.o_proj.weight", LlamaSlot::kWo},
      {".post_attention_layernorm.weight", LlamaSlot::kFfnNorm},
      {".mlp.gate_proj.weight", LlamaSlot::kGate},
      {".mlp.up_proj.weight", LlamaSlot::kUp},
      {".mlp.down_proj.weight", LlamaSlot::kDown},
      {".self_attn.q_proj.bias", LlamaSlot::kBq},
      {".self_attn.k_proj.bias", LlamaSlot::kBk},
      {".self_attn.v_proj.bias", LlamaSlot::kBv},
  };
  for (const auto& [suffix, slot] : kNames)
    if (rest == suffix) return SlotRef{slot, layer};
  return std::nullopt;
}

std::string hf_name(const SlotRef& r) {
  switch (r.slot) {
    case LlamaSlot::kTokEmbd: return "model.embed_tokens.weight";
    case LlamaSlot::kOutNorm: return "model.norm.weight";
    case LlamaSlot::kLmHead: return "lm_head.weight";
    case LlamaSlot::kAttnNorm: return fmt::format("model.layers.{}.input_layernorm.weight", r.layer);
    case LlamaSlot::kWq: return fmt::format("model.layers.{}.self_attn.q_proj.weight", r.layer);
    case LlamaSlot::kWk: return fmt::format("model.layers.{}.self_attn.k_proj.weight", r.layer);
    case LlamaSlot::kWv: return fmt::format("model.layers.{}.self_attn.v_proj.weight", r.layer);
    case LlamaSlot::kWo: return fmt::format("model.layers.{}.self_attn.o_proj.weight", r.layer);
    case LlamaSlot::kFfnNorm: return fmt::format("model.layers.{}.post_attention_layernorm.weight", r.layer);
    case LlamaSlot::kGate: return fmt::format("model.layers.{}.mlp.gate_proj.weight", r.layer);
    case LlamaSlot::kUp: return fmt::format("model.layers.{}.mlp.up_proj.weight", r.layer);
    case LlamaSlot::kDown: return fmt::format("model.layers.{}.mlp.down_proj.weight", r.layer);
    case LlamaSlot::kBq: return fmt::format("model.layers.{}.self_attn.q_proj.bias", r.layer);
    case LlamaSlot::kBk: return fmt::format("model.layers.{}.self_attn.k_proj.bias", r.layer);
    case LlamaSlot::kBv: return fmt::format("model.layers.{}.self_attn.v_proj.bias", r.layer);
  }
  return "?";
}

// The weight files and, for a sharded checkpoint, which file the index says
// holds each tensor.
struct WeightFiles {
  std::vector<fs::path> files;
  std::map<std::string, size_t> index;  // tensor -> files[] (sharded only)
  bool sharded = false;
};

WeightFiles find_weight_files(const fs::path& dir) {
  WeightFiles w;
  std::error_code ec;
  if (optional_regular_file(dir / "model.safetensors", "the weights of a Hugging Face checkpoint")) {
    w.files.push_back(dir / "model.safetensors");
    return w;
  }
  const fs::path ip = dir / "model.safetensors.index.json";
  FUTR_CHECK(optional_regular_file(ip, "the shard index of a Hugging Face checkpoint"),
             "{}: no model.safetensors or model.safetensors.index.json", dir.string());
  w.sharded = true;
  const std::string src = ip.string();
  const json j = parse_json(read_small_file(ip, kMaxIndexBytes), src);
  const json* map = field(j, "weight_map");
  FUTR_CHECK(map && map->is_object(), "{}: no 'weight_map' object", src);
  std::map<std::string, size_t> file_ids;
  for (const auto& [name, file] : map->items()) {
    FUTR_CHECK(file.is_string(), "{}: weight_map['{}'] must be a file name", src, clip(name));
    const std::string f = file.get<std::string>();
    FUTR_CHECK(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
                   f.find('\\') == std::string::npos && f.find('\0') == std::string::npos,
               "{}: weight_map['{}'] = '{}' is not a plain file name in the directory", src, clip(name),
               clip(f));
    auto [it, added] = file_ids.emplace(f, w.files.size());
    if (added) {
      FUTR_CHECK(optional_regular_file(dir / f, "a shard named by " + src),
                 "{}: shard '{}' (named by the index) is missing", src, clip(f));
      w.files.push_back(dir / f);
    }
    w.index.emplace(name, it->second);
  }
  FUTR_CHECK(!w.files.empty(), "{}: the weight_map is empty", src);
  return w;
}

}  // namespace

ModelConfig parse_hf_config(std::string_view text, const std::string& src) {
  const json j = parse_json(text, src);
  ModelConfig c;
  const json* archs = field(j, "architectures");
  const std::optional<std::string> mt = opt_string(j, "model_type", src);
  FUTR_CHECK(archs || mt, "{}: neither 'architectures' nor 'model_type' is given", src);
  // Qwen2ForCausalLM is LlamaForCausalLM with biases on q, k and v;
  // MistralForCausalLM is LlamaForCausalLM with an optional sliding window.
  bool qwen2 = mt && *mt == "qwen2";
  bool mistral = mt && *mt == "mistral";
  if (archs) {
    FUTR_CHECK(archs->is_array(), "{}: 'architectures' must be an array", src);
    bool known = false;
    for (const json& a : *archs) {
      const std::string name = a.is_string() ? a.get<std::string>() : "";
      known =
          known || name == "LlamaForCausalLM" || name == "Qwen2ForCausalLM" || name == "MistralForCausalLM";
      qwen2 = qwen2 || name == "Qwen2ForCausalLM";
      mistral = mistral || name == "MistralForCausalLM";
    }
    FUTR_CHECK(known,
               "{}: unsupported architecture {} (supported: LlamaForCausalLM, MistralForCausalLM, "
               "Qwen2ForCausalLM; {})",
               src, json_snippet(*archs), kSupportedArchitectures);
  }
  FUTR_CHECK(!mt || *mt == "llama" || *mt == "qwen2" || *mt == "mistral",
             "{}: unsupported model_type '{}' ({})", src, clip(*mt), kSupportedArchitectures);
  c.arch = qwen2 ? "qwen2" : "llama";
  c.qkv_bias = qwen2;
  // NOTE: Qwen2 configs carry sliding_window even when it is off (use_sliding_window false).
  FUTR_CHECK(!opt_bool(j, "use_sliding_window", src).value_or(false),
             "{}: sliding-window attention (use_sliding_window = true) is not supported", src);
  c.name = opt_string(j, "_name_or_path", src).value_or("");
  if (auto act = opt_string(j, "hidden_act", src))
    FUTR_CHECK(*act == "silu", "{}: hidden_act '{}' is not supported (silu only)", src, clip(*act));
  for (const char* bias : {"attention_bias", "mlp_bias"})
    FUTR_CHECK(!opt_bool(j, bias, src).value_or(false), "{}: '{}' = true is not supported", src, bias);
  c.hidden = req_int(j, "hidden_size", src);
  c.n_layers = req_int(j, "num_hidden_layers", src);
  c.n_heads = req_int(j, "num_attention_heads", src);
  c.n_kv_heads = opt_int(j, "num_key_value_heads", src).value_or(c.n_heads);
  c.intermediate = req_int(j, "intermediate_size", src);
  c.vocab = req_int(j, "vocab_size", src);
  if (auto hd = opt_int(j, "head_dim", src)) {
    c.head_dim = *hd;
  } else {
    FUTR_CHECK(c.n_heads > 0 && c.hidden % c.n_heads == 0,
               "{}: hidden_size {} is not a multiple of num_attention_heads {} (and no head_dim)", src,
               c.hidden, c.n_heads);
    c.head_dim = c.hidden / c.n_heads;
  }
  c.rms_eps = opt_float(j, "rms_norm_eps", src).value_or(1e-6f);
  c.max_context = opt_int(j, "max_position_embeddings", src).value_or(2048);
  // Mistral's sliding window (7B v0.1: 4096; null from v0.2 on): attention
  // over the last `window` positions equals full attention up to that many
  // positions, so the model runs exactly with its context capped there.
  if (mistral)
    if (const std::optional<int> w = opt_int(j, "sliding_window", src)) {
      FUTR_CHECK(*w > 0, "{}: sliding_window {} must be positive (or null: no window)", src, *w);
      c.max_context = std::min(c.max_context, *w);
    }
  c.tied_embeddings = opt_bool(j, "tie_word_embeddings", src).value_or(false);
  c.rope_theta = opt_float(j, "rope_theta", src).value_or(10000.0f);
  if (const json* rp = field(j, "rope_parameters")) read_rope(*rp, "rope_parameters", c, src);
  else if (const json* rs = field(j, "rope_scaling")) read_rope(*rs, "rope_scaling", c, src);
  return c;
}

ModelConfig read_hf_config(const fs::path& dir) {
  const fs::path p = dir / "config.json";
  ModelConfig c = parse_hf_config(read_small_file(p, kMaxConfigBytes), p.string());
  if (c.name.empty()) c.name = fs::absolute(dir).lexically_normal().filename().string();
  c.validate(p.string());
  return c;
}

std::vector<fs::path> hf_weight_files(const fs::path& dir) { return find_weight_files(dir).files; }

Model load_hf_model(const fs::path& dir, bool with_weights) {
  Model m;
  m.path = dir.string();
  m.format = "hf-safetensors";
  m.config = read_hf_config(dir);
  ModelConfig& c = m.config;
  // The tokenizer first (before any weight is read), bounded by the config's vocabulary.
  if (optional_regular_file(dir / "tokenizer.json", "the tokenizer of a Hugging Face checkpoint"))
    m.tokenizer = tokenizer_spec_from_hf_json(dir, c.vocab);
  FUTR_CHECK(m.tokenizer.tokens.size() <= size_t(c.vocab),
             "{}: tokenizer.json has {} tokens but vocab_size is {}", dir.string(), m.tokenizer.tokens.size(),
             c.vocab);
  check_tokenizer_spec(m.tokenizer, (dir / "tokenizer.json").string());

  const WeightFiles wf = find_weight_files(dir);
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  struct Where {
    size_t file;
    const SafetensorsTensor* t;
  };
  std::map<std::string, Where> all;
  for (size_t i = 0; i < wf.files.size(); ++i) {
    files.push_back(std::make_unique<SafetensorsFile>(wf.files[i]));
    for (const SafetensorsTensor& t : files.back()->tensors()) {
      auto [it, added] = all.emplace(t.name, Where{i, &t});
      FUTR_CHECK(added, "{}: tensor '{}' is in both {} and {}", dir.string(), t.name,
                 wf.files[it->second.file].filename().string(), wf.files[i].filename().string());
    }
  }
  for (const auto& [name, fi] : wf.index) {
    auto it = all.find(name);
    FUTR_CHECK(it != all.end() && it->second.file == fi,
               "{}: model.safetensors.index.json puts '{}' in {}, but that file does not hold it",
               dir.string(), clip(name), wf.files[fi].filename().string());
  }

  std::vector<SlotTensor> slots;
  std::vector<const Where*> slot_src;
  for (const auto& [name, where] : all) {
    m.sources.push_back({name, where.t->dtype, where.t->shape, where.t->end - where.t->begin});
    if (name.ends_with(".rotary_emb.inv_freq")) continue;  // a buffer, recomputed from rope_theta
    const std::optional<SlotRef> ref = hf_slot(name);
    FUTR_CHECK(ref.has_value(), "{}: unexpected tensor '{}' (not part of LlamaForCausalLM)",
               wf.files[where.file].string(), clip(name));
    if (ref->slot == LlamaSlot::kLmHead && c.tied_embeddings) continue;  // tied: embed wins
    slots.push_back({*ref, name, where.t->shape});
    slot_src.push_back(&where);
  }
  const std::string what = dir.string();
  const bool has_head = check_llama_layout(c, slots, what, "config.json", hf_name);
  c.tied_embeddings = !has_head;
  if (!with_weights) return m;

  m.weights.layers.resize(size_t(c.n_layers));
  for (size_t i = 0; i < slots.size(); ++i)
    slot_tensor(m.weights, slots[i].ref) = files[slot_src[i]->file]->read_tensor(*slot_src[i]->t);
  return m;
}

}  // namespace futr
