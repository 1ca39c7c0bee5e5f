// GGUF reader on hostile and broken files: each gets a futr::Error naming the
// file and the problem, never a crash or an absurd allocation.
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "support/expect_error.h"

using namespace futr;
using namespace futr::test;

namespace {

GgufFile parse(const Bytes& b) { return GgufFile(std::span<const uint8_t>(b), "bad.gguf"); }
Model load(const Bytes& b) { return load_gguf_model(parse(b), true); }

GgufWriter tiny(uint32_t type = T_F32) {
  TinyLlama m;
  m.make();
  return m.writer(type);
}

// A GGUF holding one KV with a raw payload (for malformed values).
Bytes one_kv(uint32_t type, const Bytes& payload) {
  GgufWriter g;
  g.add_raw("k", type, payload);
  return g.bytes();
}

}  // namespace

TEST(GgufBroken, TruncatedAnywhere) {
  const Bytes full = tiny(T_Q4_1).bytes();
  const GgufFile ok = parse(full);
  const uint64_t header_end = ok.data_offset();
  ASSERT_GT(full.size(), header_end);
  for (size_t len = 0; len < full.size(); len += (len < header_end + 64 ? 1 : 97)) {
    const Bytes cut(full.begin(), full.begin() + long(len));
    try {
      parse(cut);
      ADD_FAILURE() << "no error for a file truncated to " << len << " bytes";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
      EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                  msg.find("past the end") != std::string::npos ||
                  msg.find("bad magic") != std::string::npos || msg.find("impossible") != std::string::npos)
          << len << ": " << msg;
    }
  }
}

TEST(GgufBroken, Header) {
  Bytes b = tiny().bytes();
  b[0] = 'X';
  EXPECT_FUTR_ERROR(parse(b), "bad.gguf: not a GGUF file (bad magic)");
  GgufWriter g = tiny();
  g.version = 1;
  EXPECT_FUTR_ERROR(parse(g.bytes()), "GGUF version 1 is not supported");
  g.version = 4;
  EXPECT_FUTR_ERROR(parse(g.bytes()), "unsupported GGUF version 4");
  g.version = 0x03000000;
  EXPECT_FUTR_ERROR(parse(g.bytes()), "big-endian");
}

TEST(GgufBroken, HugeCounts) {
  GgufWriter g = tiny();
  g.override_counts = true;
  g.n_tensors_override = 1ull << 60;
  g.n_kv_override = 3;
  EXPECT_FUTR_ERROR(parse(g.bytes()), "tensor count 1152921504606846976 is impossible");
  g.n_tensors_override = 0;
  g.n_kv_override = ~0ull;
  EXPECT_FUTR_ERROR(parse(g.bytes()), "metadata count 18446744073709551615 is impossible");
}

TEST(GgufBroken, HugeStringAndArrayLengths) {
  Bytes s;
  put<uint64_t>(s, 1ull << 62);
  EXPECT_FUTR_ERROR(parse(one_kv(STR, s)), "truncated: metadata 'k' needs 4611686018427387904 bytes");
  // Key length past the end.
  Bytes raw = GgufWriter().bytes();
  raw.resize(24);  // the header alone
  raw[16] = 1;     // kv count = 1
  put<uint64_t>(raw, ~0ull);
  raw.resize(raw.size() + 8, 'x');
  EXPECT_FUTR_ERROR(parse(raw), "truncated: metadata entry 0 key");
  for (uint32_t et : {uint32_t(U8), uint32_t(U64), uint32_t(STR), uint32_t(ARR)}) {
    Bytes a;
    put<uint32_t>(a, et);
    put<uint64_t>(a, 1ull << 61);
    EXPECT_FUTR_ERROR(parse(one_kv(ARR, a)), "array of 2305843009213693952");
  }
  // A string array whose count fits but whose strings run past the end.
  Bytes a;
  put<uint32_t>(a, STR);
  put<uint64_t>(a, 2);
  put_str(a, "ok");
  put<uint64_t>(a, 1000);
  EXPECT_FUTR_ERROR(parse(one_kv(ARR, a)), "truncated");
}

TEST(GgufBroken, BadValueTypes) {
  EXPECT_FUTR_ERROR(parse(one_kv(13, {1, 2, 3, 4})), "metadata 'k': unknown value type 13");
  Bytes a;
  put<uint32_t>(a, 77);
  put<uint64_t>(a, 1);
  EXPECT_FUTR_ERROR(parse(one_kv(ARR, a)), "unknown array element type 77");
  // Arrays nested 9 deep.
  Bytes n;
  for (int i = 0; i < 9; ++i) put<uint32_t>(n, ARR), put<uint64_t>(n, 1);
  put<uint32_t>(n, U8);
  put<uint64_t>(n, 0);
  EXPECT_FUTR_ERROR(parse(one_kv(ARR, n)), "arrays nested deeper than 8");
}

TEST(GgufBroken, DuplicatesAndEmptyKey) {
  GgufWriter g = tiny();
  g.add_u32("llama.block_count", 2);
  EXPECT_FUTR_ERROR(parse(g.bytes()), "duplicate metadata key 'llama.block_count'");
  GgufWriter t = tiny();
  t.add_f32_tensor("output_norm.weight", {64}, std::vector<float>(64, 1.0f));
  EXPECT_FUTR_ERROR(parse(t.bytes()), "duplicate tensor name 'output_norm.weight'");
  GgufWriter e;
  e.add_u32("", 1);
  EXPECT_FUTR_ERROR(parse(e.bytes()), "empty key");
}

TEST(GgufBroken, TensorInfos) {
  auto with = [](const std::string& name, uint32_t type, std::vector<uint64_t> ne, Bytes data,
                 int64_t off = -1) {
    GgufWriter g;
    g.add_tensor(name, type, std::move(ne), std::move(data), off);
    return g.bytes();
  };
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {}, {})), "tensor 'x' has 0 dimensions");
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {1, 1, 1, 1, 1}, Bytes(4))), "has 5 dimensions");
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {4, 0}, {})), "has dimension 1 = 0");
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {1ull << 40, 1ull << 40}, {})), "more than 2^50 elements");
  EXPECT_FUTR_ERROR(parse(with("x", 99, {32}, Bytes(32))), "tensor 'x' has unknown ggml type 99");
  EXPECT_FUTR_ERROR(parse(with("x", T_Q4_0, {48}, Bytes(27))), "not a multiple of the block size 32");
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {8}, Bytes(32), 4)),
                    "offset 4 is not a multiple of the alignment 32");
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {8}, Bytes(32), 1ll << 40)), "past the end of the file");
  EXPECT_FUTR_ERROR(parse(with("x", T_F32, {1ull << 30}, Bytes(32))), "past the end of the file");
  GgufWriter o;
  o.add_tensor("a", T_F32, {16}, Bytes(64), 0);
  o.add_tensor("b", T_F32, {8}, Bytes(32), 32);
  EXPECT_FUTR_ERROR(parse(o.bytes()), "data of tensors 'a' [0, +64) and 'b' [32, +32) overlap");
}

TEST(GgufBroken, Alignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    GgufWriter g;
    g.add_u32("general.alignment", a);
    EXPECT_FUTR_ERROR(parse(g.bytes()), "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  GgufWriter s;
  s.add_string("general.alignment", "32");
  EXPECT_FUTR_ERROR(parse(s.bytes()), "general.alignment: expected an integer, found string");
}

TEST(GgufBroken, UnsupportedTensorType) {
  GgufWriter g = tiny();
  g.remove_tensor("output_norm.weight");
  g.add_tensor("output_norm.weight", T_IQ4_XS, {256}, Bytes(136));
  // Parsing succeeds (the type is known); loading names it.
  EXPECT_NO_THROW(parse(g.bytes()));
  TinyLlama m;
  m.hidden = 256;
  m.heads = 16;
  m.make();
  GgufWriter h = m.writer();
  h.remove_tensor("output_norm.weight");
  h.add_tensor("output_norm.weight", T_IQ4_XS, {256}, Bytes(136));
  EXPECT_FUTR_ERROR(load(h.bytes()),
                    "tensor 'output_norm.weight' has type IQ4_XS, which futr cannot dequantize");
  // Q8_1 (ggml: 36-byte blocks, an activation type) is sized right and refused by name.
  GgufWriter q = m.writer();
  q.remove_tensor("output_norm.weight");
  q.add_tensor("output_norm.weight", T_Q8_1, {256}, Bytes(8 * 36));
  EXPECT_FUTR_ERROR(load(q.bytes()),
                    "tensor 'output_norm.weight' has type Q8_1, which futr cannot dequantize");
}

TEST(GgufBroken, NonFiniteValues) {
  TinyLlama m;
  m.make();
  m.weights[3].v[5] = std::nanf("");
  EXPECT_FUTR_ERROR(load(m.writer().bytes()), "tensor 'blk.0.attn_k.weight' has a non-finite value");
}

TEST(GgufBroken, ArchitectureKeys) {
  auto without = [](const std::string& key) {
    GgufWriter g = tiny();
    g.remove_kv(key);
    return g;
  };
  GgufWriter g = without("general.architecture");
  EXPECT_FUTR_ERROR(load(g.bytes()), "missing metadata key 'general.architecture'");
  g.add_string("general.architecture", "gemma");
  EXPECT_FUTR_ERROR(load(g.bytes()), "bad.gguf: unsupported architecture 'gemma' (supported: llama");
  for (const char* k :
       {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
        "llama.attention.head_count", "llama.context_length", "llama.attention.layer_norm_rms_epsilon"})
    EXPECT_FUTR_ERROR(load(without(k).bytes()), std::string("missing metadata key '") + k);
  GgufWriter s = without("llama.block_count");
  s.add_string("llama.block_count", "2");
  EXPECT_FUTR_ERROR(load(s.bytes()), "llama.block_count: expected an integer, found string");
  GgufWriter big = without("llama.block_count");
  big.add_u64("llama.block_count", 1ull << 40);
  EXPECT_FUTR_ERROR(load(big.bytes()), "llama.block_count = 1099511627776 is out of range");
  GgufWriter z = without("llama.attention.head_count_kv");
  z.add_u32("llama.attention.head_count_kv", 3);
  EXPECT_FUTR_ERROR(load(z.bytes()), "n_heads 4 is not a multiple of n_kv_heads 3");
  GgufWriter r = without("llama.rope.dimension_count");
  r.add_u32("llama.rope.dimension_count", 8);
  EXPECT_FUTR_ERROR(load(r.bytes()), "partial RoPE is not supported");
  GgufWriter y = tiny();
  y.add_string("llama.rope.scaling.type", "yarn");
  EXPECT_FUTR_ERROR(load(y.bytes()), "unsupported rope_scaling type 'yarn'");
  GgufWriter e = without("llama.rope.freq_base");
  e.add_f32("llama.rope.freq_base", std::numeric_limits<float>::infinity());
  EXPECT_FUTR_ERROR(load(e.bytes()), "llama.rope.freq_base = inf is out of range");
}

TEST(GgufBroken, TensorSet) {
  GgufWriter g = tiny();
  g.remove_tensor("blk.1.ffn_up.weight");
  EXPECT_FUTR_ERROR(load(g.bytes()), "bad.gguf: missing tensor 'blk.1.ffn_up.weight'");
  GgufWriter x = tiny();
  x.add_f32_tensor("blk.0.attn_q.bias", {64}, std::vector<float>(64));
  EXPECT_FUTR_ERROR(load(x.bytes()),
                    "tensor 'blk.0.attn_q.bias' is a projection bias, which the llama architecture");
  GgufWriter l = tiny();
  l.add_f32_tensor("blk.2.attn_norm.weight", {64}, std::vector<float>(64));
  EXPECT_FUTR_ERROR(load(l.bytes()),
                    "tensor 'blk.2.attn_norm.weight' belongs to layer 2, but the model has 2 layers");
  GgufWriter lead = tiny();
  lead.add_f32_tensor("blk.01.attn_norm.weight", {64}, std::vector<float>(64));
  EXPECT_FUTR_ERROR(load(lead.bytes()), "unexpected tensor 'blk.01.attn_norm.weight'");
  GgufWriter s = tiny();
  s.remove_tensor("blk.0.ffn_gate.weight");
  s.add_f32_tensor("blk.0.ffn_gate.weight", {64, 96}, std::vector<float>(96 * 64));
  EXPECT_FUTR_ERROR(
      load(s.bytes()),
      "tensor 'blk.0.ffn_gate.weight' has shape [64, 96], expected [96, 64] from the llama.* metadata");
}

TEST(GgufBroken, TokenizerKeys) {
  auto with_tokens = [](int n) {
    GgufWriter g = tiny();
    std::vector<std::string> t;
    for (int i = 0; i < n; ++i) t.push_back(std::to_string(i));
    g.add_string_array("tokenizer.ggml.tokens", t);
    return g;
  };
  GgufWriter b = with_tokens(40);
  b.add_u32("tokenizer.ggml.bos_token_id", 40);
  EXPECT_FUTR_ERROR(load(b.bytes()),
                    "tokenizer.ggml.bos_token_id = 40 is not a valid token id (vocabulary of 40)");
  GgufWriter t = with_tokens(40);
  t.add_i32_array("tokenizer.ggml.token_type", {1, 1});
  EXPECT_FUTR_ERROR(load(t.bytes()), "token_type has 2 entries but there are 40 tokens");
  GgufWriter u = with_tokens(2);
  u.add_i32_array("tokenizer.ggml.token_type", {1, 9});
  EXPECT_FUTR_ERROR(load(u.bytes()), "unknown type 9");
  GgufWriter many = with_tokens(41);
  EXPECT_FUTR_ERROR(load(many.bytes()), "the tokenizer has 41 tokens but the model's vocabulary is 40");
  GgufWriter i = tiny();
  i.add_i32_array("tokenizer.ggml.tokens", {1, 2});
  EXPECT_FUTR_ERROR(load(i.bytes()),
                    "tokenizer.ggml.tokens: expected an array of strings, found array of i32");
  GgufWriter bb = tiny();
  bb.add_u32("tokenizer.ggml.add_bos_token", 1);
  EXPECT_FUTR_ERROR(load(bb.bytes()), "add_bos_token: expected a bool, found u32");
}

TEST(GgufBroken, RopeFreqsNotLlama3) {
  GgufWriter g = tiny();
  std::vector<float> r(8, 1.0f);
  r[7] = 8.0f;
  r[3] = 50.0f;  // a spike: no llama3 curve has it
  g.add_f32_tensor("rope_freqs.weight", {8}, r);
  EXPECT_FUTR_ERROR(load(g.bytes()), "rope_freqs.weight is not llama3 RoPE scaling");
  GgufWriter one = tiny();
  std::vector<float> ones(8, 1.0f);
  ones[7] = 0.5f;
  one.add_f32_tensor("rope_freqs.weight", {8}, ones);
  EXPECT_FUTR_ERROR(load(one.bytes()), "rope_freqs.weight does not look like llama3 RoPE scaling");
  GgufWriter w = tiny();
  w.add_f32_tensor("rope_freqs.weight", {4}, std::vector<float>(4, 1.0f));
  EXPECT_FUTR_ERROR(load(w.bytes()), "rope_freqs.weight has shape [4], expected [8]");
}
