// Test support: a small GGUF writer, so that tests make their own files
// (valid ones, and broken ones by patching the bytes) without Python.
//
// Written from the format definition (src/formats/gguf.h has the layout):
// header, KVs, tensor infos, padding to the alignment, tensor data. Values are
// stored pre-encoded so a test can write any type, nested arrays, or garbage.
// Also: reference block quantizers for Q8_0 / Q4_0 / Q4_1 (simple, for making
// test data; the reader's decoders are checked on hand-made blocks elsewhere),
// the llama.cpp Q/K row permutation written as its numpy reshape, and a
// synthetic tiny llama model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/numeric.h"

namespace futr::test {

using Bytes = std::vector<uint8_t>;

template <class T>
void put(Bytes& b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}
inline void put_str(Bytes& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

// GGUF value type ids (the file format's numbers).
enum GT : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 };
// ggml tensor type ids.
enum GGML : uint32_t {
  T_F32 = 0,
  T_F16 = 1,
  T_Q4_0 = 2,
  T_Q4_1 = 3,
  T_Q8_0 = 8,
  T_BF16 = 30,
  T_Q6_K = 14,
  T_Q8_1 = 9,
  T_IQ4_XS = 23
};

class GgufWriter {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;       // used for layout; written only via set_alignment()
  bool override_counts = false;  // write n_tensors_override / n_kv_override instead
  uint64_t n_tensors_override = 0, n_kv_override = 0;

  // A KV with a pre-encoded value (type id + payload as the file holds it).
  void add_raw(const std::string& key, uint32_t type, const Bytes& payload) {
    kvs_.push_back({key, type, payload});
  }
  // Drops every KV named `key` (to replace one: remove, then add).
  void remove(const std::string& key) {
    std::erase_if(kvs_, [&](const auto& kv) { return kv.key == key; });
  }
  void add_u32(const std::string& k, uint32_t v) { add_raw(k, U32, enc(v)); }
  void add_i32(const std::string& k, int32_t v) { add_raw(k, I32, enc(v)); }
  void add_u64(const std::string& k, uint64_t v) { add_raw(k, U64, enc(v)); }
  void add_f32(const std::string& k, float v) { add_raw(k, F32, enc(v)); }
  void add_bool(const std::string& k, bool v) { add_raw(k, BOOL, enc(uint8_t(v))); }
  void add_string(const std::string& k, const std::string& v) {
    Bytes b;
    put_str(b, v);
    add_raw(k, STR, b);
  }
  void add_string_array(const std::string& k, const std::vector<std::string>& v) {
    Bytes b;
    put<uint32_t>(b, STR);
    put<uint64_t>(b, v.size());
    for (const auto& s : v) put_str(b, s);
    add_raw(k, ARR, b);
  }
  void add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    Bytes b;
    put<uint32_t>(b, I32);
    put<uint64_t>(b, v.size());
    for (int32_t x : v) put(b, x);
    add_raw(k, ARR, b);
  }
  void add_f32_array(const std::string& k, const std::vector<float>& v) {
    Bytes b;
    put<uint32_t>(b, F32);
    put<uint64_t>(b, v.size());
    for (float x : v) put(b, x);
    add_raw(k, ARR, b);
  }
  void remove_kv(const std::string& key) {
    std::erase_if(kvs_, [&](const KV& kv) { return kv.key == key; });
  }
  void remove_tensor(const std::string& name) {
    std::erase_if(tensors_, [&](const T& t) { return t.name == name; });
  }
  void set_alignment(uint32_t a) {
    alignment = a;
    add_u32("general.alignment", a);
  }

  // A tensor: `ne` in GGUF order (ne[0] innermost), data as stored. The offset
  // is assigned on serialization unless `offset` is given.
  void add_tensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne, Bytes data,
                  int64_t offset = -1) {
    tensors_.push_back({name, type, std::move(ne), std::move(data), offset});
  }
  // An FP32 tensor from a canonical (outermost-first) shape.
  void add_f32_tensor(const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& v) {
    Bytes b(v.size() * 4);
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    add_tensor(name, T_F32, reversed(shape), std::move(b));
  }

  Bytes bytes() const {
    Bytes b;
    put<uint32_t>(b, 0x46554747u);  // "GGUF" little-endian
    put<uint32_t>(b, version);
    put<uint64_t>(b, override_counts ? n_tensors_override : tensors_.size());
    put<uint64_t>(b, override_counts ? n_kv_override : kvs_.size());
    for (const auto& kv : kvs_) {
      put_str(b, kv.key);
      put<uint32_t>(b, kv.type);
      b.insert(b.end(), kv.payload.begin(), kv.payload.end());
    }
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const auto& t : tensors_) {
      put_str(b, t.name);
      put<uint32_t>(b, uint32_t(t.ne.size()));
      for (uint64_t n : t.ne) put<uint64_t>(b, n);
      put<uint32_t>(b, t.type);
      const uint64_t o = t.offset >= 0 ? uint64_t(t.offset) : off;
      put<uint64_t>(b, o);
      offs.push_back(o);
      if (o <= (1u << 30)) off = (std::max(off, o + t.data.size()) + alignment - 1) / alignment * alignment;
    }
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    const size_t data_start = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      if (offs[i] > (1u << 30)) continue;  // a deliberately absurd offset: write no data
      if (b.size() < data_start + offs[i] + t.data.size()) b.resize(data_start + offs[i] + t.data.size(), 0);
      // NOTE: memcpy's pointers must be valid even for 0 bytes (UBSan: nonnull); empty tensors copy nothing.
      if (!t.data.empty()) std::memcpy(b.data() + data_start + offs[i], t.data.data(), t.data.size());
    }
    return b;
  }

  void write(const std::filesystem::path& p) const { write_bytes(p, bytes()); }

  static void write_bytes(const std::filesystem::path& p, const Bytes& b) {
    std::ofstream o(p, std::ios::binary);
    o.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  static std::vector<uint64_t> reversed(const std::vector<int64_t>& s) { return {s.rbegin(), s.rend()}; }
  template <class T>
  static Bytes enc(T v) {
    Bytes b;
    put(b, v);
    return b;
  }

 private:
  struct KV {
    std::string key;
    uint32_t type;
    Bytes payload;
  };
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    Bytes data;
    int64_t offset;
  };
  std::vector<KV> kvs_;
  std::vector<T> tensors_;
};

// --- reference quantizers (rows of `x` are blocks of 32 along the row) ---

inline Bytes quantize_q8_0(const std::vector<float>& x) {
  Bytes b;
  for (size_t i = 0; i < x.size(); i += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i + j]));
    const float d = amax / 127;
    put<uint16_t>(b, float_to_fp16(d));
    for (int j = 0; j < 32; ++j) b.push_back(uint8_t(int8_t(d ? std::lround(x[i + j] / d) : 0)));
  }
  return b;
}

inline Bytes quantize_q4_0(const std::vector<float>& x) {
  Bytes b;
  for (size_t i = 0; i < x.size(); i += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i + j]));
    const float d = amax / 7;
    put<uint16_t>(b, float_to_fp16(d));
    auto q = [&](int j) { return uint8_t(std::clamp(int(d ? std::lround(x[i + j] / d) : 0) + 8, 0, 15)); };
    for (int j = 0; j < 16; ++j) b.push_back(uint8_t(q(j) | (q(j + 16) << 4)));
  }
  return b;
}

inline Bytes quantize_q4_1(const std::vector<float>& x) {
  Bytes b;
  for (size_t i = 0; i < x.size(); i += 32) {
    float lo = x[i], hi = x[i];
    for (int j = 0; j < 32; ++j) lo = std::min(lo, x[i + j]), hi = std::max(hi, x[i + j]);
    const float d = (hi - lo) / 15;
    put<uint16_t>(b, float_to_fp16(d));
    put<uint16_t>(b, float_to_fp16(lo));
    auto q = [&](int j) { return uint8_t(std::clamp(int(d ? std::lround((x[i + j] - lo) / d) : 0), 0, 15)); };
    for (int j = 0; j < 16; ++j) b.push_back(uint8_t(q(j) | (q(j + 16) << 4)));
  }
  return b;
}

// llama.cpp's converter permutation of Q/K rows, written as its numpy form:
// w.reshape(n_head, 2, d/2, cols).swapaxes(1, 2).reshape(rows, cols).
inline std::vector<float> llama_cpp_permute(const std::vector<float>& w, int64_t rows, int64_t cols,
                                            int64_t n_head) {
  const int64_t half = rows / n_head / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t a = 0; a < 2; ++a)       // axis 1 of the (n_head, 2, half) view
      for (int64_t b = 0; b < half; ++b)  // axis 2
        for (int64_t c = 0; c < cols; ++c)
          // source [h][a][b][c] -> destination [h][b][a][c]
          out[size_t(((h * half + b) * 2 + a) * cols + c)] = w[size_t(((h * 2 + a) * half + b) * cols + c)];
  return out;
}

// A tiny synthetic llama model in canonical (Hugging Face) order; with
// arch = "qwen2", a Qwen2 (q/k/v biases, qwen2.* keys, Q/K rows not permuted).
struct TinyLlama {
  std::string arch = "llama";
  int hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16, inter = 96, vocab = 40;
  int ctx = 256;
  float theta = 10000.0f, eps = 1e-5f;
  bool tied = true;
  // name (GGUF convention) -> canonical shape and values
  struct W {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> v;
  };
  std::vector<W> weights;

  void make(uint32_t seed = 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    auto w = [&](const std::string& n, std::vector<int64_t> s) {
      W x{n, s, std::vector<float>(size_t(s[0] * (s.size() > 1 ? s[1] : 1)))};
      for (float& f : x.v) f = nd(rng);
      weights.push_back(std::move(x));
    };
    const int64_t q = int64_t(heads) * head_dim, kv = int64_t(kv_heads) * head_dim;
    w("token_embd.weight", {vocab, hidden});
    for (int l = 0; l < layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      w(p + "attn_norm.weight", {hidden});
      w(p + "attn_q.weight", {q, hidden});
      w(p + "attn_k.weight", {kv, hidden});
      w(p + "attn_v.weight", {kv, hidden});
      if (arch == "qwen2") {
        w(p + "attn_q.bias", {q});
        w(p + "attn_k.bias", {kv});
        w(p + "attn_v.bias", {kv});
      }
      w(p + "attn_output.weight", {hidden, q});
      w(p + "ffn_norm.weight", {hidden});
      w(p + "ffn_gate.weight", {inter, hidden});
      w(p + "ffn_up.weight", {inter, hidden});
      w(p + "ffn_down.weight", {hidden, inter});
    }
    w("output_norm.weight", {hidden});
    if (!tied) w("output.weight", {vocab, hidden});
  }
  const W& get(const std::string& n) const {
    for (const auto& x : weights)
      if (x.name == n) return x;
    throw std::runtime_error("no weight " + n);
  }

  // The metadata llama.cpp writes for such a model (without a tokenizer).
  void add_metadata(GgufWriter& g) const {
    const std::string a = arch + ".";
    g.add_string("general.architecture", arch);
    g.add_string("general.name", "tiny");
    g.add_u32(a + "block_count", uint32_t(layers));
    g.add_u32(a + "context_length", uint32_t(ctx));
    g.add_u32(a + "embedding_length", uint32_t(hidden));
    g.add_u32(a + "feed_forward_length", uint32_t(inter));
    g.add_u32(a + "attention.head_count", uint32_t(heads));
    g.add_u32(a + "attention.head_count_kv", uint32_t(kv_heads));
    if (head_dim * heads != hidden) g.add_u32(a + "attention.key_length", uint32_t(head_dim));
    g.add_f32(a + "rope.freq_base", theta);
    g.add_f32(a + "attention.layer_norm_rms_epsilon", eps);
    g.add_u32(a + "vocab_size", uint32_t(vocab));
    g.add_u32(a + "rope.dimension_count", uint32_t(head_dim));
  }

  // Adds every weight as F32, with Q and K rows permuted the way llama.cpp's
  // converter stores them. `type_of` may pick another type per tensor.
  void add_tensors(GgufWriter& g, uint32_t matrix_type = T_F32) const {
    for (const auto& x : weights) {
      std::vector<float> v = x.v;
      if (arch == "llama" && x.name.find("attn_q.") != std::string::npos)
        v = llama_cpp_permute(v, x.shape[0], x.shape[1], heads);
      if (arch == "llama" && x.name.find("attn_k.") != std::string::npos)
        v = llama_cpp_permute(v, x.shape[0], x.shape[1], kv_heads);
      const uint32_t t = x.shape.size() == 2 ? matrix_type : uint32_t(T_F32);
      Bytes b;
      if (t == T_F32) {
        b.resize(v.size() * 4);
        if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
      } else if (t == T_F16 || t == T_BF16) {
        for (float f : v) put<uint16_t>(b, t == T_F16 ? float_to_fp16(f) : float_to_bf16(f));
      } else if (t == T_Q8_0) {
        b = quantize_q8_0(v);
      } else if (t == T_Q4_0) {
        b = quantize_q4_0(v);
      } else {
        b = quantize_q4_1(v);
      }
      g.add_tensor(x.name, t, GgufWriter::reversed(x.shape), std::move(b));
    }
  }

  GgufWriter writer(uint32_t matrix_type = T_F32) const {
    GgufWriter g;
    add_metadata(g);
    add_tensors(g, matrix_type);
    return g;
  }
};

// A fresh directory under the test temp dir, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("futr_formats_" + tag + "_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace futr::test
