// GGUF -> futr::Model for the llama architecture: the llama.* keys, the
// tokenizer.ggml.* keys, tensor names, the Q/K row permutation and the llama3
// RoPE factors (rope_freqs.weight). See gguf.h and docs/FORMATS.md.
#include <cfloat>
#include <cmath>
#include <numbers>
#include <optional>

#include "core/error.h"
#include "core/text.h"
#include "formats/gguf.h"
#include "formats/llama_layout.h"
#include "model/rope.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

std::string key_what(const GgufFile& f, std::string_view key) { return fmt::format("{}: {}", f.path(), key); }

std::optional<int64_t> opt_int(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  return v->as_int(key_what(f, key));
}

// An int config field: present, integer, within int range (validate() checks the real limits).
int req_int(const GgufFile& f, const std::string& key) {
  const std::optional<int64_t> v = opt_int(f, key);
  FUTR_CHECK(v.has_value(), "{}: missing metadata key '{}'", f.path(), key);
  FUTR_CHECK(*v >= 0 && *v <= INT32_MAX, "{}: {} = {} is out of range", f.path(), key, *v);
  return int(*v);
}

// Like req_int, but also accepts a per-layer array whose entries are all equal
// (some converters write head_count_kv that way).
std::optional<int> opt_uniform_int(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  int64_t x;
  if (v->type == GgufType::kArray) {
    FUTR_CHECK(v->count <= 4096, "{}: {} is an array of {} entries (one per layer expected)", f.path(), key,
               v->count);
    const std::vector<int64_t> xs = v->int_array(key_what(f, key));
    FUTR_CHECK(!xs.empty(), "{}: {} is an empty array", f.path(), key);
    for (int64_t y : xs)
      FUTR_CHECK(y == xs[0], "{}: {} differs between layers ({} vs {}); unsupported", f.path(), key, xs[0],
                 y);
    x = xs[0];
  } else {
    x = v->as_int(key_what(f, key));
  }
  FUTR_CHECK(x >= 0 && x <= INT32_MAX, "{}: {} = {} is out of range", f.path(), key, x);
  return int(x);
}

std::optional<double> opt_float(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const double x = v->as_float(key_what(f, key));
  FUTR_CHECK(std::isfinite(x) && std::fabs(x) <= double(FLT_MAX), "{}: {} = {} is out of range", f.path(),
             key, x);
  return x;
}

std::optional<std::string> opt_string(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  return std::string(v->as_string(key_what(f, key)));
}

// A token id key: integer, and a valid index when the vocabulary is known.
int32_t token_id(const GgufFile& f, const std::string& key, size_t n_tokens) {
  const std::optional<int64_t> v = opt_int(f, key);
  if (!v) return -1;
  const int64_t limit = n_tokens ? int64_t(n_tokens) : int64_t(INT32_MAX);
  FUTR_CHECK(*v >= 0 && *v < limit, "{}: {} = {} is not a valid token id (vocabulary of {})", f.path(), key,
             *v, n_tokens);
  return int32_t(*v);
}

// GGUF tensor name -> llama slot; nullopt for names outside the architecture.
std::optional<SlotRef> gguf_slot(std::string_view name) {
  if (name == "token_embd.weight") return SlotRef{LlamaSlot::kTokEmbd, -1};
  if (name == "output_norm.weight") return SlotRef{LlamaSlot::kOutNorm, -1};
  if (name == "output.weight") return SlotRef{LlamaSlot::kLmHead, -1};
  if (!name.starts_with("blk.")) return std::nullopt;
  std::string_view rest;
  const int layer = parse_layer_index(name.substr(4), rest);
  if (layer < 0) return std::nullopt;
  static constexpr std::pair<std::string_view, LlamaSlot> kNames[] = {
      {".attn_norm.weight", LlamaSlot::kAttnNorm},
      {".attn_q.weight", LlamaSlot::kWq},
      {".attn_k.weight", LlamaSlot::kWk},
      {".attn_v.weight", LlamaSlot::kWv},
      {".attn_output.weight", LlamaSlot::kWo},
      {".ffn_norm.weight", LlamaSlot::kFfnNorm},
      {".ffn_gate.weight", LlamaSlot::kGate},
      {".ffn_up.weight", LlamaSlot::kUp},
      {".ffn_down.weight", LlamaSlot::kDown},
      {".attn_q.bias", LlamaSlot::kBq},
      {".attn_k.bias", LlamaSlot::kBk},
      {".attn_v.bias", LlamaSlot::kBv},
  };
  for (const auto& [suffix, slot] : kNames)
    if (rest == suffix) return SlotRef{slot, layer};
  return std::nullopt;
}

std::string gguf_name(const SlotRef& r) {
  switch (r.slot) {
    case LlamaSlot::kTokEmbd: return "token_embd.weight";
    case LlamaSlot::kOutNorm: return "output_norm.weight";
    case LlamaSlot::kLmHead: return "output.weight";
    default: break;
  }
  const char* s = "";
  switch (r.slot) {
    case LlamaSlot::kBq: return fmt::format("blk.{}.attn_q.bias", r.layer);
    case LlamaSlot::kBk: return fmt::format("blk.{}.attn_k.bias", r.layer);
    case LlamaSlot::kBv: return fmt::format("blk.{}.attn_v.bias", r.layer);
    case LlamaSlot::kAttnNorm: s = "attn_norm"; break;
    case LlamaSlot::kWq: s = "attn_q"; break;
    case LlamaSlot::kWk: s = "attn_k"; break;
    case LlamaSlot::kWv: s = "attn_v"; break;
    case LlamaSlot::kWo: s = "attn_output"; break;
    case LlamaSlot::kFfnNorm: s = "ffn_norm"; break;
    case LlamaSlot::kGate: s = "ffn_gate"; break;
    case LlamaSlot::kUp: s = "ffn_up"; break;
    default: s = "ffn_down"; break;
  }
  return fmt::format("blk.{}.{}.weight", r.layer, s);
}

// llama3 RoPE factors as llama.cpp stores them in rope_freqs.weight: the
// divisor of each rotary frequency (model/rope.h, the one home of the spec).
std::vector<double> llama3_factors(const RopeScaling& s, double theta, int head_dim) {
  return rope_freq_factors(head_dim, float(theta), s);
}

// Recovers llama3 scaling parameters from stored per-frequency factors. The
// factors depend on (original_max_position, low, high) only through the two
// wavelength bounds orig/high and orig/low, so orig is taken from the file
// (or 8192) and low/high fitted; the fit is accepted only if it reproduces
// every stored factor to 1e-4.
RopeScaling fit_llama3(const std::vector<float>& r, double theta, int head_dim, int orig,
                       const std::string& where) {
  RopeScaling s;
  const size_t n = r.size();
  const double f = r.back();
  bool all_one = true;
  for (float x : r) all_one = all_one && std::fabs(x - 1.0f) < 1e-6f;
  if (all_one) return s;  // type "none"
  FUTR_CHECK(f > 1.0, "{}: rope_freqs.weight does not look like llama3 RoPE scaling (last factor {})", where,
             f);
  std::vector<double> inv_wl(n);  // 1 / wavelength, decreasing in i
  const std::vector<double> base = rope_inv_freq(head_dim, float(theta), RopeScaling{});
  for (size_t i = 0; i < n; ++i) inv_wl[i] = base[i] / (2 * std::numbers::pi);
  // Intermediate points: factor strictly between 1 and f.
  std::vector<size_t> mid;
  size_t last_one = n, first_f = n;
  for (size_t i = 0; i < n; ++i) {
    if (std::fabs(r[i] - 1.0) < 1e-5) last_one = i;
    else if (std::fabs(r[i] - f) < 1e-5 * f) {
      if (first_f == n) first_f = i;
    } else mid.push_back(i);
  }
  // smooth = a / wl + b, with smooth(1/high_wl) = 1 and smooth(1/low_wl) = 0.
  double x_hi, x_lo;  // 1/high_wl > 1/low_wl
  if (mid.size() >= 2) {
    auto smooth = [&](size_t i) { return (1.0 / r[i] - 1.0 / f) / (1.0 - 1.0 / f); };
    const size_t i0 = mid.front(), i1 = mid.back();
    const double a = (smooth(i0) - smooth(i1)) / (inv_wl[i0] - inv_wl[i1]);
    const double b = smooth(i0) - a * inv_wl[i0];
    FUTR_CHECK(a > 0, "{}: rope_freqs.weight is not monotone llama3 scaling", where);
    x_hi = (1 - b) / a;
    x_lo = -b / a;
  } else {
    // No or one intermediate point: put the bounds inside the gaps around it.
    const double hi_edge = last_one < n ? inv_wl[last_one] : inv_wl[0] * 2;
    const double lo_edge = first_f < n ? inv_wl[first_f] : inv_wl[n - 1] / 2;
    if (mid.empty()) {
      x_hi = hi_edge - (hi_edge - lo_edge) / 3;
      x_lo = lo_edge + (hi_edge - lo_edge) / 3;
    } else {
      // Choose x_lo in the lower gap, then x_hi so that the point's smooth matches.
      const size_t i = mid[0];
      const double sm = (1.0 / r[i] - 1.0 / f) / (1.0 - 1.0 / f);
      FUTR_CHECK(sm > 1e-6 && sm < 1, "{}: rope_freqs.weight is not llama3 RoPE scaling", where);
      x_lo = (lo_edge + inv_wl[i]) / 2;
      x_hi = x_lo + (inv_wl[i] - x_lo) / sm;
    }
  }
  FUTR_CHECK(std::isfinite(x_hi) && x_hi > x_lo && x_lo > 0 && orig * x_hi < 1e30 && f < 1e30,
             "{}: rope_freqs.weight is not llama3 RoPE scaling", where);
  s.type = "llama3";
  s.factor = float(f);
  s.original_max_position = orig;
  s.high_freq_factor = float(orig * x_hi);  // orig / high_wl
  s.low_freq_factor = float(orig * x_lo);
  const std::vector<double> back = llama3_factors(s, theta, head_dim);
  for (size_t i = 0; i < n; ++i)
    FUTR_CHECK(std::fabs(back[i] - r[i]) <= 1e-4 * r[i],
               "{}: rope_freqs.weight is not llama3 RoPE scaling (factor {} = {}, the best llama3 "
               "fit gives {})",
               where, i, r[i], back[i]);
  return s;
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::optional<std::string> arch = opt_string(f, "general.architecture");
  FUTR_CHECK(arch.has_value(), "{}: missing metadata key 'general.architecture'", f.path());
  FUTR_CHECK(*arch == "llama" || *arch == "qwen2", "{}: unsupported architecture '{}' ({})", f.path(),
             printable(*arch, 100), kSupportedArchitectures);
  c.arch = *arch;
  c.qkv_bias = *arch == "qwen2";  // Qwen2: the same keys under qwen2.*, biases on q, k and v
  const std::string p = *arch + ".";
  c.name = opt_string(f, "general.name").value_or("");
  c.n_layers = req_int(f, p + "block_count");
  c.hidden = req_int(f, p + "embedding_length");
  c.intermediate = req_int(f, p + "feed_forward_length");
  c.n_heads = opt_uniform_int(f, p + "attention.head_count").value_or(-1);
  FUTR_CHECK(c.n_heads >= 0, "{}: missing metadata key '{}attention.head_count'", f.path(), p);
  c.n_kv_heads = opt_uniform_int(f, p + "attention.head_count_kv").value_or(c.n_heads);
  c.max_context = req_int(f, p + "context_length");
  if (const auto kl = opt_int(f, p + "attention.key_length")) {
    FUTR_CHECK(*kl > 0 && *kl <= 4096, "{}: {}attention.key_length = {} is out of range", f.path(), p, *kl);
    c.head_dim = int(*kl);
  } else {
    FUTR_CHECK(c.n_heads > 0 && c.hidden % c.n_heads == 0,
               "{}: embedding_length {} is not a multiple of head_count {}", f.path(), c.hidden, c.n_heads);
    c.head_dim = c.hidden / c.n_heads;
  }
  if (const auto vl = opt_int(f, p + "attention.value_length"))
    FUTR_CHECK(*vl == c.head_dim, "{}: {}attention.value_length {} differs from the key length {}", f.path(),
               p, *vl, c.head_dim);
  if (const auto rd = opt_int(f, p + "rope.dimension_count"))
    FUTR_CHECK(*rd == c.head_dim,
               "{}: {}rope.dimension_count {} differs from the head size {} (partial RoPE is not "
               "supported)",
               f.path(), p, *rd, c.head_dim);
  c.rope_theta = float(opt_float(f, p + "rope.freq_base").value_or(10000.0));
  const std::optional<double> eps = opt_float(f, p + "attention.layer_norm_rms_epsilon");
  FUTR_CHECK(eps.has_value(), "{}: missing metadata key '{}attention.layer_norm_rms_epsilon'", f.path(), p);
  c.rms_eps = float(*eps);
  if (const auto v = opt_int(f, p + "vocab_size")) {
    FUTR_CHECK(*v >= 0 && *v <= INT32_MAX, "{}: {}vocab_size = {} is out of range", f.path(), p, *v);
    c.vocab = int(*v);
  } else if (const GgufValue* t = f.find("tokenizer.ggml.tokens")) {
    FUTR_CHECK(t->type == GgufType::kArray && t->count <= INT32_MAX,
               "{}: tokenizer.ggml.tokens is not a token array", f.path());
    c.vocab = int(t->count);
  }
  // RoPE scaling keys. llama3 scaling is stored as the rope_freqs.weight tensor
  // (handled by load_gguf_model); linear/yarn are named here and rejected by validate().
  const std::string st = opt_string(f, p + "rope.scaling.type").value_or("none");
  const double sf = opt_float(f, p + "rope.scaling.factor").value_or(1.0);
  const double lin = opt_float(f, p + "rope.scale_linear").value_or(1.0);
  if (st != "none") {
    c.rope_scaling.type = st.substr(0, 100);
    c.rope_scaling.factor = float(sf);
  } else if (lin != 1.0) {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = float(lin);
  }
  if (const auto oc = opt_int(f, p + "rope.scaling.original_context_length")) {
    FUTR_CHECK(*oc > 0 && *oc <= (1 << 24),
               "{}: {}rope.scaling.original_context_length = {} is "
               "out of range",
               f.path(), p, *oc);
    c.rope_scaling.original_max_position = int(*oc);
  }
  return c;
}

TokenizerSpec gguf_tokenizer_spec(const GgufFile& f) {
  TokenizerSpec s;
  if (auto m = opt_string(f, "tokenizer.ggml.model")) s.model = *m;
  if (auto p = opt_string(f, "tokenizer.ggml.pre")) s.pre = *p;
  if (const GgufValue* v = f.find("tokenizer.ggml.tokens"))
    s.tokens = v->string_array(key_what(f, "tokenizer.ggml.tokens"));
  if (const GgufValue* v = f.find("tokenizer.ggml.token_type")) {
    FUTR_CHECK(v->type != GgufType::kArray || v->count == s.tokens.size(),
               "{}: tokenizer.ggml.token_type has {} entries but there are {} tokens", f.path(), v->count,
               s.tokens.size());
    const std::vector<int64_t> t = v->int_array(key_what(f, "tokenizer.ggml.token_type"));
    s.token_types.reserve(t.size());
    for (int64_t x : t) {
      FUTR_CHECK(x >= 0 && x <= 6, "{}: tokenizer.ggml.token_type has an unknown type {}", f.path(), x);
      s.token_types.push_back(int32_t(x));
    }
  }
  if (const GgufValue* v = f.find("tokenizer.ggml.merges"))
    s.merges = v->string_array(key_what(f, "tokenizer.ggml.merges"));
  // SentencePiece ("llama"): the merge priority of each token, and whether a
  // space goes before the text (llama.cpp's default for this model: true).
  if (const GgufValue* v = f.find("tokenizer.ggml.scores"); v && s.model == "llama") {
    FUTR_CHECK(v->type != GgufType::kArray || v->count == s.tokens.size(),
               "{}: tokenizer.ggml.scores has {} entries but there are {} tokens", f.path(), v->count,
               s.tokens.size());
    const std::vector<double> sc = v->float_array(key_what(f, "tokenizer.ggml.scores"));
    s.scores.assign(sc.begin(), sc.end());
  }
  if (const GgufValue* v = f.find("tokenizer.ggml.add_space_prefix"))
    s.add_space_prefix = v->as_bool(key_what(f, "tokenizer.ggml.add_space_prefix"));
  const size_t n = s.tokens.size();
  s.bos = token_id(f, "tokenizer.ggml.bos_token_id", n);
  s.eos = token_id(f, "tokenizer.ggml.eos_token_id", n);
  s.unk = token_id(f, "tokenizer.ggml.unknown_token_id", n);
  s.pad = token_id(f, "tokenizer.ggml.padding_token_id", n);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = token_id(f, key, n);
    if (id >= 0 && id != s.eos && std::find(s.extra_eos.begin(), s.extra_eos.end(), id) == s.extra_eos.end())
      s.extra_eos.push_back(id);
  }
  if (const GgufValue* v = f.find("tokenizer.ggml.add_bos_token"))
    s.add_bos = v->as_bool(key_what(f, "tokenizer.ggml.add_bos_token"));
  if (auto t = opt_string(f, "tokenizer.chat_template")) s.chat_template = *t;
  return s;
}

void unpermute_rope_rows(Tensor& w, int n_head) {
  FUTR_ASSERT(w.rank() == 2 && n_head > 0 && w.dim(0) % (2 * n_head) == 0);
  const int64_t rows = w.dim(0), cols = w.dim(1), d = rows / n_head, half = d / 2;
  std::vector<float> out(w.data.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = w.data.data() + (h * d + 2 * j + s) * cols;
        std::copy(src, src + cols, out.data() + (h * d + s * half + j) * cols);
      }
  w.data = std::move(out);
}

void permute_rope_rows(Tensor& w, int n_head) {
  FUTR_ASSERT(w.rank() == 2 && n_head > 0 && w.dim(0) % (2 * n_head) == 0);
  const int64_t rows = w.dim(0), cols = w.dim(1), d = rows / n_head, half = d / 2;
  std::vector<float> out(w.data.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = w.data.data() + (h * d + s * half + j) * cols;
        std::copy(src, src + cols, out.data() + (h * d + 2 * j + s) * cols);
      }
  w.data = std::move(out);
}

Model load_gguf_model(const std::filesystem::path& path, bool with_weights) {
  const GgufFile f(path);
  return load_gguf_model(f, with_weights);
}

Model load_gguf_model(const GgufFile& f, bool with_weights) {
  Model m;
  m.path = f.path();
  m.format = "gguf";
  m.config = gguf_model_config(f);
  m.tokenizer = gguf_tokenizer_spec(f);
  ModelConfig& c = m.config;
  if (c.vocab == 0)
    if (const GgufTensorInfo* t = f.find_tensor("token_embd.weight"); t && t->ne.size() == 2)
      c.vocab = int(std::min<uint64_t>(t->ne[1], INT32_MAX));
  c.validate(f.path());

  // Tensors: every one must be a llama slot (or the llama3 RoPE factors).
  std::vector<SlotTensor> slots;
  const GgufTensorInfo* rope_freqs = nullptr;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == "rope_freqs.weight") {
      rope_freqs = &t;
      continue;
    }
    const std::optional<SlotRef> ref = gguf_slot(t.name);
    FUTR_CHECK(ref.has_value(), "{}: unexpected tensor '{}' (not part of the {} architecture)", f.path(),
               printable(t.name, 200), c.arch);
    slots.push_back({*ref, t.name, t.shape()});
  }
  const bool has_head = check_llama_layout(c, slots, f.path(), "the " + c.arch + ".* metadata", gguf_name);
  c.tied_embeddings = !has_head;

  if (rope_freqs) {
    FUTR_CHECK(c.rope_scaling.type == "none",
               "{}: both rope_freqs.weight and rope scaling type '{}' are present", f.path(),
               c.rope_scaling.type);
    FUTR_CHECK(rope_freqs->ne.size() == 1 && rope_freqs->ne[0] == uint64_t(c.head_dim / 2),
               "{}: rope_freqs.weight has shape {}, expected [{}]", f.path(),
               shape_string(rope_freqs->shape()), c.head_dim / 2);
    const Tensor r = f.read_tensor(*rope_freqs);
    const int orig = c.rope_scaling.original_max_position;
    c.rope_scaling = fit_llama3(r.data, c.rope_theta, c.head_dim, orig, f.path());
    c.validate(f.path());
  }
  FUTR_CHECK(m.tokenizer.tokens.size() <= size_t(c.vocab),
             "{}: the tokenizer has {} tokens but the model's vocabulary is {}", f.path(),
             m.tokenizer.tokens.size(), c.vocab);
  check_tokenizer_spec(m.tokenizer, f.path());  // before any weight is read

  for (const GgufTensorInfo& t : f.tensors())
    m.sources.push_back({t.name, t.type_info().name, t.shape(), t.nbytes});
  if (!with_weights) return m;

  m.weights.layers.resize(size_t(c.n_layers));
  for (const SlotTensor& st : slots) {
    Tensor w = f.read_tensor(*f.find_tensor(st.name));
    // NOTE: llama.cpp's converter interleaves the Q/K rows of llama models
    // only; qwen2 keeps Hugging Face's rotate-half order (its NEOX RoPE).
    if (c.arch == "llama" && st.ref.slot == LlamaSlot::kWq) unpermute_rope_rows(w, c.n_heads);
    if (c.arch == "llama" && st.ref.slot == LlamaSlot::kWk) unpermute_rope_rows(w, c.n_kv_heads);
    slot_tensor(m.weights, st.ref) = std::move(w);
  }
  return m;
}

}  // namespace futr
