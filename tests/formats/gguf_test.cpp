// GGUF reader on valid files: every metadata value type, tensor types,
// the Q/K permutation (against llama.cpp's permutation and as RoPE math), the
// tokenizer keys, llama3 RoPE factors, and the real SmolLM2 file (values
// checked against the Python `gguf` package's dequantization, recorded below).
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numbers>

#include "formats/gguf_writer.h"
#include "formats/loader.h"
#include "support/expect_error.h"
#include "tokenizer/tokenizer.h"

using namespace futr;
using namespace futr::test;

namespace {

GgufFile parse(const Bytes& b) { return GgufFile(std::span<const uint8_t>(b), "mem.gguf"); }

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i)
    num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

Model load_bytes(const Bytes& b, bool weights = true) { return load_gguf_model(parse(b), weights); }

}  // namespace

TEST(Gguf, EveryValueType) {
  GgufWriter g;
  g.add_raw("u8", U8, GgufWriter::enc(uint8_t(200)));
  g.add_raw("i8", I8, GgufWriter::enc(int8_t(-100)));
  g.add_raw("u16", U16, GgufWriter::enc(uint16_t(60000)));
  g.add_raw("i16", I16, GgufWriter::enc(int16_t(-30000)));
  g.add_u32("u32", 4000000000u);
  g.add_i32("i32", -2000000000);
  g.add_f32("f32", 1.5f);
  g.add_bool("bool", true);
  g.add_string("str", "h\xc3\xa9llo");
  g.add_u64("u64", 1ull << 40);
  g.add_raw("i64", I64, GgufWriter::enc(int64_t(-(1ll << 40))));
  g.add_raw("f64", F64, GgufWriter::enc(2.25));
  g.add_string_array("strs", {"a", "", "ccc"});
  g.add_i32_array("ints", {1, -2, 3});
  // array of arrays of strings: [["x", "yy"], []]
  Bytes nested;
  put<uint32_t>(nested, ARR);
  put<uint64_t>(nested, 2);
  put<uint32_t>(nested, STR);
  put<uint64_t>(nested, 2);
  put_str(nested, "x");
  put_str(nested, "yy");
  put<uint32_t>(nested, STR);
  put<uint64_t>(nested, 0);
  g.add_raw("nested", ARR, nested);
  Bytes f64s;
  put<uint32_t>(f64s, F64);
  put<uint64_t>(f64s, 2);
  put<double>(f64s, 0.5);
  put<double>(f64s, -4.0);
  g.add_raw("f64s", ARR, f64s);
  const Bytes b = g.bytes();
  const GgufFile f = parse(b);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.find("u8")->as_int("u8"), 200);
  EXPECT_EQ(f.find("i8")->as_int("i8"), -100);
  EXPECT_EQ(f.find("u16")->as_int("u16"), 60000);
  EXPECT_EQ(f.find("i16")->as_int("i16"), -30000);
  EXPECT_EQ(f.find("u32")->as_int("u32"), 4000000000ll);
  EXPECT_EQ(f.find("i32")->as_int("i32"), -2000000000);
  EXPECT_EQ(f.find("f32")->as_float("f32"), 1.5);
  EXPECT_TRUE(f.find("bool")->as_bool("bool"));
  EXPECT_EQ(f.find("str")->as_string("str"), "h\xc3\xa9llo");
  EXPECT_EQ(f.find("u64")->as_int("u64"), 1ll << 40);
  EXPECT_EQ(f.find("i64")->as_int("i64"), -(1ll << 40));
  EXPECT_EQ(f.find("f64")->as_float("f64"), 2.25);
  EXPECT_EQ(f.find("strs")->string_array("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.find("ints")->int_array("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.find("f64s")->float_array("f64s"), (std::vector<double>{0.5, -4.0}));
  const std::vector<GgufValue> outer = f.find("nested")->array_items("nested");
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(outer[0].string_array("n0"), (std::vector<std::string>{"x", "yy"}));
  EXPECT_TRUE(outer[1].string_array("n1").empty());
  EXPECT_EQ(f.find("nested")->summary(), "array[2] of array");
  EXPECT_EQ(f.find("missing"), nullptr);
  // Type mismatches are errors naming the key.
  EXPECT_FUTR_ERROR(f.find("str")->as_int("str"), "str: expected an integer, found string");
  EXPECT_FUTR_ERROR(f.find("ints")->string_array("ints"), "expected an array of strings");
  EXPECT_FUTR_ERROR(f.find("u32")->as_bool("u32"), "expected a bool");
  EXPECT_FUTR_ERROR(f.find("f64s")->int_array("f64s"),
                    "expected an array of integers, found an array of f64");
  EXPECT_FUTR_ERROR(f.find("strs")->float_array("strs"), "expected an array of numbers");
  EXPECT_EQ(f.find("ints")->float_array("ints"), (std::vector<double>{1, -2, 3}));
  EXPECT_FUTR_ERROR(f.find("u64")->int_array("u64"), "expected an array, found u64");
}

TEST(Gguf, Version2AndCustomAlignment) {
  TinyLlama m;
  m.make();
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t align : {0u, 1u, 64u, 4096u}) {
      GgufWriter g = m.writer();
      g.version = version;
      if (align) g.set_alignment(align);
      const Bytes b = g.bytes();
      const GgufFile f = parse(b);
      EXPECT_EQ(f.version(), version);
      EXPECT_EQ(f.alignment(), align ? align : 32u);
      EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
      const Model model = load_gguf_model(f);
      EXPECT_EQ(model.weights.tok_embd.data, m.get("token_embd.weight").v);
    }
  }
}

TEST(Gguf, TinyModelF32ConfigAndWeights) {
  TinyLlama m;
  m.tied = false;
  m.make(7);
  const Model model = load_bytes(m.writer().bytes());
  const ModelConfig& c = model.config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate, 96);
  EXPECT_EQ(c.vocab, 40);
  EXPECT_EQ(c.max_context, 256);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_EQ(model.format, "gguf");
  EXPECT_EQ(model.sources.size(), 2u * 9 + 3);
  EXPECT_EQ(model.sources[0].name, "token_embd.weight");
  EXPECT_EQ(model.sources[0].type, "F32");
  EXPECT_EQ(model.sources[0].shape, (std::vector<int64_t>{40, 64}));
  EXPECT_EQ(model.sources[0].bytes, 40u * 64 * 4);
  // Every weight, Q and K included, equals the canonical (Hugging Face order) original.
  const LayerWeights& l1 = model.weights.layers[1];
  EXPECT_EQ(l1.wq.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(l1.wk.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(l1.wq.data, m.get("blk.1.attn_q.weight").v);
  EXPECT_EQ(l1.wk.data, m.get("blk.1.attn_k.weight").v);
  EXPECT_EQ(l1.wv.data, m.get("blk.1.attn_v.weight").v);
  EXPECT_EQ(l1.wo.data, m.get("blk.1.attn_output.weight").v);
  EXPECT_EQ(l1.w_down.data, m.get("blk.1.ffn_down.weight").v);
  EXPECT_EQ(l1.w_down.shape, (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(model.weights.lm_head.data, m.get("output.weight").v);
  EXPECT_EQ(model.weights.out_norm.data, m.get("output_norm.weight").v);
  EXPECT_EQ(model.parameter_count(), 40 * 64 * 2 + 64 + 2 * (64 * 64 * 2 + 32 * 64 * 2 + 96 * 64 * 3 + 128));
  // Metadata only: same config and sources, no weights.
  const Model header = load_bytes(m.writer().bytes(), false);
  EXPECT_EQ(header.sources.size(), model.sources.size());
  EXPECT_TRUE(header.weights.layers.empty());
}

// Qwen2 as llama.cpp writes it: the llama keys under qwen2.*, q/k/v biases,
// and Q/K rows in Hugging Face's order (NEOX RoPE: no permutation to undo).
TEST(Gguf, Qwen2BiasesAndUnpermutedRows) {
  TinyLlama m;
  m.arch = "qwen2";
  m.theta = 1000000.0f;
  m.make(11);
  const Model model = load_bytes(m.writer().bytes());
  EXPECT_EQ(model.config.arch, "qwen2");
  EXPECT_TRUE(model.config.qkv_bias);
  EXPECT_EQ(model.config.rope_theta, 1000000.0f);
  const LayerWeights& l1 = model.weights.layers[1];
  EXPECT_EQ(l1.wq.data, m.get("blk.1.attn_q.weight").v);
  EXPECT_EQ(l1.wk.data, m.get("blk.1.attn_k.weight").v);
  EXPECT_EQ(l1.bq.data, m.get("blk.1.attn_q.bias").v);
  EXPECT_EQ(l1.bk.data, m.get("blk.1.attn_k.bias").v);
  EXPECT_EQ(l1.bv.data, m.get("blk.1.attn_v.bias").v);
  EXPECT_EQ(l1.bq.shape, (std::vector<int64_t>{64}));
  // A missing bias is named; a bias in a llama file is refused.
  GgufWriter missing = m.writer();
  missing.remove_tensor("blk.0.attn_v.bias");
  EXPECT_FUTR_ERROR(load_bytes(missing.bytes()), "missing tensor 'blk.0.attn_v.bias'");
  TinyLlama llama;
  llama.make(11);
  GgufWriter extra = llama.writer();
  extra.add_f32_tensor("blk.0.attn_q.bias", {64}, std::vector<float>(64, 0.5f));
  EXPECT_FUTR_ERROR(load_bytes(extra.bytes()), "a projection bias, which the llama architecture");
  // Architectures that do not run are named with what does.
  TinyLlama gemma;
  gemma.arch = "gemma";
  gemma.make(11);
  EXPECT_FUTR_ERROR(load_bytes(gemma.writer().bytes()), "unsupported architecture 'gemma' (supported: llama");
}

// A SentencePiece vocabulary (Llama-2, TinyLlama, Mistral): model "llama",
// scores, add_space_prefix.
TEST(Gguf, SentencePieceTokenizerMetadata) {
  TinyLlama m;
  m.vocab = 300;
  m.make();
  GgufWriter g = m.writer();
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    types.push_back(6);
  }
  for (const char* t : {"\xE2\x96\x81t", "he", "\xE2\x96\x81the"}) {  // ids 259, 260, 261
    toks.push_back(t);
    types.push_back(1);
  }
  std::vector<float> scores(toks.size(), 0.0f);
  scores.back() = -3.5f;
  g.add_string("tokenizer.ggml.model", "llama");
  g.add_string_array("tokenizer.ggml.tokens", toks);
  g.add_f32_array("tokenizer.ggml.scores", scores);
  g.add_i32_array("tokenizer.ggml.token_type", types);
  g.add_u32("tokenizer.ggml.bos_token_id", 1);
  g.add_u32("tokenizer.ggml.eos_token_id", 2);
  g.add_u32("tokenizer.ggml.unknown_token_id", 0);
  g.add_bool("tokenizer.ggml.add_space_prefix", false);
  const Model model = load_bytes(g.bytes(), false);
  const TokenizerSpec& s = model.tokenizer;
  EXPECT_EQ(s.model, "llama");
  EXPECT_EQ(s.scores, scores);
  EXPECT_FALSE(s.add_space_prefix);
  const Tokenizer tok(s);
  EXPECT_EQ(tok.encode("the", false, false), (std::vector<int32_t>{3 + 't', 260}));  // t by byte fallback
  EXPECT_EQ(tok.encode(" the", false, false), std::vector<int32_t>{261});
}

TEST(Gguf, TiedWhenOutputAbsent) {
  TinyLlama m;
  m.make();
  const Model model = load_bytes(m.writer().bytes());
  EXPECT_TRUE(model.config.tied_embeddings);
  EXPECT_TRUE(model.weights.lm_head.empty());
  EXPECT_EQ(&model.weights.output(), &model.weights.tok_embd);
}

TEST(Gguf, HeadDimFromKeyLength) {
  TinyLlama m;
  m.head_dim = 32;  // 4 heads x 32 = 128 != hidden 64
  m.make();
  const Model model = load_bytes(m.writer().bytes());
  EXPECT_EQ(model.config.head_dim, 32);
  EXPECT_EQ(model.weights.layers[0].wq.shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(model.weights.layers[0].wo.shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(model.weights.layers[0].wq.data, m.get("blk.0.attn_q.weight").v);
  EXPECT_EQ(model.weights.layers[0].wk.data, m.get("blk.0.attn_k.weight").v);
}

// Each stored type dequantizes to within its quantization error of the original.
TEST(Gguf, QuantizedTypes) {
  TinyLlama m;
  m.make(3);
  const std::map<uint32_t, double> bound = {
      {T_F16, 1e-3}, {T_BF16, 5e-3}, {T_Q8_0, 1e-2}, {T_Q4_0, 0.15}, {T_Q4_1, 0.1}};
  for (const auto& [type, tol] : bound) {
    const Model model = load_bytes(m.writer(type).bytes());
    EXPECT_EQ(model.sources[0].type, ggml_type_name(type));
    for (const char* n :
         {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.1.ffn_down.weight", "token_embd.weight"}) {
      const std::string s(n);
      const Tensor& t = s == "token_embd.weight"     ? model.weights.tok_embd
                        : s == "blk.0.attn_q.weight" ? model.weights.layers[0].wq
                        : s == "blk.0.attn_k.weight" ? model.weights.layers[0].wk
                                                     : model.weights.layers[1].w_down;
      const double e = rel_err(t.data, m.get(n).v);
      EXPECT_LT(e, tol) << ggml_type_name(type) << " " << n;
    }
  }
}

TEST(Gguf, PermutationRoundTrip) {
  Tensor w({48, 5});
  for (size_t i = 0; i < w.data.size(); ++i) w.data[i] = float(i);
  const std::vector<float> orig = w.data;
  const std::vector<float> llama = llama_cpp_permute(orig, 48, 5, 3);
  permute_rope_rows(w, 3);
  EXPECT_EQ(w.data, llama);
  unpermute_rope_rows(w, 3);
  EXPECT_EQ(w.data, orig);
}

// The meaning of the permutation: RoPE with interleaved pairs (2i, 2i+1) on the
// GGUF rows gives the same rotated q as rotate-half pairs (i, i + d/2) on the
// canonical rows, up to the reordering. So a model loaded from GGUF and run with
// rotate-half RoPE computes what llama.cpp computes.
TEST(Gguf, PermutationMatchesRopePairing) {
  const int n_head = 2, d = 8, cols = 6, pos = 5;
  const double theta = 10000;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> w_hf(size_t(n_head * d * cols)), x(cols);
  for (float& v : w_hf) v = nd(rng);
  for (float& v : x) v = nd(rng);
  const std::vector<float> w_gguf = llama_cpp_permute(w_hf, n_head * d, cols, n_head);
  auto matvec = [&](const std::vector<float>& w) {
    std::vector<double> q(size_t(n_head * d));
    for (int r = 0; r < n_head * d; ++r)
      for (int c = 0; c < cols; ++c) q[size_t(r)] += double(w[size_t(r * cols + c)]) * x[size_t(c)];
    return q;
  };
  std::vector<double> q_hf = matvec(w_hf), q_gg = matvec(w_gguf);
  for (int h = 0; h < n_head; ++h)
    for (int i = 0; i < d / 2; ++i) {
      const double a = pos * std::pow(theta, -2.0 * i / d), co = std::cos(a), si = std::sin(a);
      double* p = &q_hf[size_t(h * d)];  // rotate-half: (i, i + d/2)
      const double x0 = p[i], x1 = p[i + d / 2];
      p[i] = x0 * co - x1 * si, p[i + d / 2] = x0 * si + x1 * co;
      double* g = &q_gg[size_t(h * d)];  // interleaved: (2i, 2i + 1)
      const double y0 = g[2 * i], y1 = g[2 * i + 1];
      g[2 * i] = y0 * co - y1 * si, g[2 * i + 1] = y0 * si + y1 * co;
    }
  // Undo the permutation on the rotated GGUF result: it must equal the HF result.
  Tensor t({n_head * d, 1});
  for (size_t i = 0; i < q_gg.size(); ++i) t.data[i] = float(q_gg[i]);
  unpermute_rope_rows(t, n_head);
  for (size_t i = 0; i < q_hf.size(); ++i) EXPECT_NEAR(t.data[i], q_hf[i], 1e-5) << i;
}

TEST(Gguf, TokenizerMetadata) {
  TinyLlama m;
  m.vocab = 135;
  m.make();
  GgufWriter g = m.writer();
  std::vector<std::string> toks;
  for (int i = 0; i < 40; ++i) toks.push_back(std::to_string(i).insert(0, 1, 't'));
  // Then the printable ASCII byte tokens (the tokenizer check at load needs them; space is U+0120).
  toks.push_back("\xc4\xa0");
  for (int b = 0x21; b < 0x7f; ++b) toks.push_back(std::string(1, char(b)));
  std::vector<int32_t> types(toks.size(), 1);
  types[0] = 3;
  g.add_string("tokenizer.ggml.model", "gpt2");
  g.add_string("tokenizer.ggml.pre", "smollm");
  g.add_string_array("tokenizer.ggml.tokens", toks);
  g.add_i32_array("tokenizer.ggml.token_type", types);
  g.add_string_array("tokenizer.ggml.merges", {"t 1", "t1 0"});
  g.add_u32("tokenizer.ggml.bos_token_id", 1);
  g.add_u32("tokenizer.ggml.eos_token_id", 2);
  g.add_u32("tokenizer.ggml.unknown_token_id", 0);
  g.add_u32("tokenizer.ggml.padding_token_id", 2);
  g.add_u32("tokenizer.ggml.eot_token_id", 7);
  g.add_u32("tokenizer.ggml.eom_token_id", 8);
  g.add_bool("tokenizer.ggml.add_bos_token", true);
  g.add_string("tokenizer.chat_template", "{{ x }}");
  const Model model = load_bytes(g.bytes(), false);
  const TokenizerSpec& s = model.tokenizer;
  EXPECT_EQ(s.model, "gpt2");
  EXPECT_EQ(s.pre, "smollm");
  EXPECT_EQ(s.tokens, toks);
  EXPECT_EQ(s.token_types, types);
  EXPECT_EQ(s.merges, (std::vector<std::string>{"t 1", "t1 0"}));
  EXPECT_EQ(s.bos, 1);
  EXPECT_EQ(s.eos, 2);
  EXPECT_EQ(s.unk, 0);
  EXPECT_EQ(s.pad, 2);
  EXPECT_EQ(s.extra_eos, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.chat_template, "{{ x }}");
  // Without a tokenizer the spec is empty.
  EXPECT_TRUE(load_bytes(m.writer().bytes(), false).tokenizer.tokens.empty());
}

// llama3 RoPE scaling as llama.cpp stores it: rope_freqs.weight holds the
// per-frequency divisors; the reader recovers the parameters.
TEST(Gguf, Llama3RopeFactors) {
  struct Case {
    int head_dim;
    float theta, factor, low, high;
    int orig;
  };
  for (const Case& k :
       {Case{128, 500000, 8, 1, 4, 8192}, Case{64, 500000, 32, 1, 4, 8192}, Case{16, 10000, 8, 1, 4, 64}}) {
    TinyLlama m;
    m.head_dim = k.head_dim;
    m.theta = k.theta;
    m.make();
    GgufWriter g = m.writer();
    std::vector<float> r(size_t(k.head_dim / 2));
    for (int i = 0; i < k.head_dim / 2; ++i) {
      const double wl = 2 * std::numbers::pi * std::pow(double(k.theta), 2.0 * i / k.head_dim);
      double f;
      if (wl < k.orig / k.high) f = 1;
      else if (wl > k.orig / k.low) f = k.factor;
      else {
        const double s = (k.orig / wl - k.low) / (k.high - k.low);
        f = 1 / ((1 - s) / k.factor + s);
      }
      r[size_t(i)] = float(f);
    }
    g.add_f32_tensor("rope_freqs.weight", {k.head_dim / 2}, r);
    g.add_u32("llama.rope.scaling.original_context_length", uint32_t(k.orig));
    const Model model = load_bytes(g.bytes(), false);
    const RopeScaling& s = model.config.rope_scaling;
    EXPECT_EQ(s.type, "llama3");
    EXPECT_FLOAT_EQ(s.factor, k.factor);
    EXPECT_EQ(s.original_max_position, k.orig);
    if (k.head_dim == 128) {  // enough intermediate frequencies to pin low/high exactly
      EXPECT_NEAR(s.low_freq_factor, k.low, 1e-3);
      EXPECT_NEAR(s.high_freq_factor, k.high, 1e-3);
    }
  }
}

// ---------------------------------------------------------------------------
// The real model: SmolLM2-135M-Instruct Q4_1.
// ---------------------------------------------------------------------------

namespace {
const char* real_model() {
  static const bool ok = std::filesystem::exists(FUTR_DEFAULT_MODEL);
  return ok ? FUTR_DEFAULT_MODEL : nullptr;
}
struct Sums {
  double sum = 0, sq = 0;
};
Sums sums(const std::vector<float>& v) {
  Sums s;
  for (float x : v) s.sum += x, s.sq += double(x) * x;
  return s;
}
}  // namespace

TEST(GgufReal, SmolLM2) {
  if (!real_model())
    GTEST_SKIP() << "default model absent (" FUTR_DEFAULT_MODEL "): run scripts/fetch-model.sh";
  const Model m = load_model(real_model());
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_EQ(m.parameter_count(), 134515008);
  std::map<std::string, int> types;
  for (const auto& s : m.sources) ++types[s.type];
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));

  const TokenizerSpec& t = m.tokenizer;
  EXPECT_EQ(t.model, "gpt2");
  EXPECT_EQ(t.pre, "smollm");
  EXPECT_EQ(t.tokens.size(), 49152u);
  EXPECT_EQ(t.token_types.size(), 49152u);
  EXPECT_EQ(t.merges.size(), 48900u);
  EXPECT_EQ(t.bos, 1);
  EXPECT_EQ(t.eos, 2);
  EXPECT_EQ(t.unk, 0);
  EXPECT_EQ(t.pad, 2);
  EXPECT_FALSE(t.add_bos);
  EXPECT_EQ(t.tokens[1], "<|im_start|>");
  EXPECT_NE(t.chat_template.find("<|im_start|>"), std::string::npos);

  // Reference values: Python gguf 0.19 (gguf.quants.dequantize), float64 sums of
  // the FP32 values; Q and K rows un-permuted with numpy
  // (reshape(n_head, d/2, 2, cols).swapaxes(1, 2)). See docs/FORMATS.md.
  const auto& w = m.weights;
  struct Ref {
    const Tensor* t;
    double sum, sq;
  };
  for (const Ref& r : {Ref{&w.tok_embd, -15353.04449415207, 520415.71544763993},
                       Ref{&w.layers[0].attn_norm, 0.6129436492919922, 0.9180835409024439},
                       Ref{&w.layers[0].w_down, 150.63577270507812, 33220.11995097203},
                       Ref{&w.layers[29].wk, 87.89241790771484, 1902.811550046259},
                       Ref{&w.layers[0].wq, 59.22322082519531, 26749.573275085306},
                       Ref{&w.out_norm, 1038.33203125, 1921.7355499267578}}) {
    const Sums s = sums(r.t->data);
    EXPECT_NEAR(s.sum, r.sum, 1e-9 * r.sq);
    EXPECT_NEAR(s.sq, r.sq, 1e-9 * r.sq);
  }
  const float* q32 = w.layers[0].wq.row(32);  // GGUF row 1 = head 0, pair 0, second half
  EXPECT_EQ(q32[0], -0.1173095703125f);
  EXPECT_EQ(q32[2], -0.19281005859375f);
  const float* k100 = w.layers[29].wk.row(100);
  EXPECT_EQ(k100[0], 0.1281890869140625f);
  EXPECT_EQ(k100[3], 0.1737518310546875f);
  EXPECT_EQ(w.tok_embd.row(1000)[1], -0.0739593505859375f);
  EXPECT_EQ(w.layers[0].w_down.row(5)[0], -0.198577880859375f);
}

TEST(GgufReal, TokenizerSpecOnlyIsFast) {
  if (!real_model())
    GTEST_SKIP() << "default model absent (" FUTR_DEFAULT_MODEL "): run scripts/fetch-model.sh";
  const TokenizerSpec t = load_tokenizer_spec(real_model());
  EXPECT_EQ(t.tokens.size(), 49152u);
  EXPECT_EQ(t.merges[0], "\xc4\xa0 t");
  const Model h = inspect_model(real_model());
  EXPECT_TRUE(h.weights.layers.empty());
  EXPECT_EQ(h.sources.size(), 272u);
}
