// The .futr model file (src/formats/futr_file.h): round trip of every weight
// format (kernel-native packing included), loader dispatch, and hostile or
// broken files (truncation anywhere, bad magic, versions, corrupted header,
// offsets and sizes out of range, wrong shapes, missing tensors).
#include "formats/futr_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/numeric.h"
#include "cpu_engine/quant_model.h"
#include "formats/loader.h"
#include "quant/delayed_scaling.h"
#include "quant/fp8_weights.h"
#include "quant/int4_quant.h"
#include "quant/quant_test_util.h"
#include "quantize/quantize.h"

using namespace futr;
using nlohmann::json;

namespace {

Model tiny() {
  Model m = test::random_model(test::quant_config(), 11);
  // The printable ASCII byte tokens (the tokenizer's minimum; space is U+0120),
  // then bytes that are not UTF-8 (they survive) and an empty token.
  m.tokenizer.tokens = {"\xc4\xa0"};
  for (int b = 0x21; b < 0x7f; ++b) m.tokenizer.tokens.push_back(std::string(1, char(b)));
  m.tokenizer.tokens.push_back("ab");
  m.tokenizer.tokens.push_back("\xff\xfe");
  m.tokenizer.tokens.push_back("");
  m.tokenizer.merges = {"a b"};
  m.tokenizer.bos = 0;
  m.tokenizer.eos = 1;
  m.tokenizer.chat_template = "{{ messages }}";
  m.tokenizer.ignore_merges = true;
  return m;
}

struct Sets {
  quant::QuantizedWeights int4, fp8, bf16;
};

Sets quantize_all(const Model& m) {
  Sets s;
  cpu::QuantizeOptions o;
  o.format = WeightFormat::kInt4;
  s.int4 = cpu::quantize_model(m, o, {});
  o.format = WeightFormat::kFp8;
  s.fp8 = cpu::quantize_model(m, o, {});
  s.fp8.fp8_initial_amax[SiteId{0, InputSite::kAttnIn}] = 12.5f;
  o.format = WeightFormat::kBf16;
  s.bf16 = cpu::quantize_model(m, o, {});
  return s;
}

std::filesystem::path tmp(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("futr_file_test_" + std::to_string(::getpid()) + "_" + name);
}

// Rewrites the JSON header of a .futr byte string; blob offsets are relative
// to the data section, which is re-appended unchanged after the new header.
std::vector<uint8_t> with_header(const std::vector<uint8_t>& bytes, const std::function<void(json&)>& edit) {
  uint64_t hb = 0;
  std::memcpy(&hb, bytes.data() + 16, 8);
  json h = json::parse(bytes.begin() + 24, bytes.begin() + 24 + long(hb));
  edit(h);
  const uint64_t data = (24 + hb + 63) / 64 * 64;
  const std::string js = h.dump();
  std::vector<uint8_t> out;
  out.reserve(bytes.size() + js.size() + 128);
  out.assign(bytes.begin(), bytes.begin() + 24);
  const uint64_t n = js.size();
  std::memcpy(out.data() + 16, &n, 8);
  out.insert(out.end(), js.begin(), js.end());
  out.resize((out.size() + 63) / 64 * 64, 0);
  out.insert(out.end(), bytes.begin() + long(data), bytes.end());
  return out;
}

// The message of the futr::Error that f throws ("" if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST(FutrFile, RoundTripEveryFormat) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> bytes = futr_bytes(m, {&s.int4, &s.fp8, &s.bf16});
  const FutrFile f(bytes, "t.futr");
  EXPECT_EQ(f.version(), kFutrFormatVersion);
  EXPECT_EQ(f.formats(),
            (std::vector<WeightFormat>{WeightFormat::kInt4, WeightFormat::kFp8, WeightFormat::kBf16}));
  const quant::QuantizedWeights i4 = f.read_weights(WeightFormat::kInt4);
  const quant::QuantizedWeights f8 = f.read_weights(WeightFormat::kFp8);
  const quant::QuantizedWeights b16 = f.read_weights(WeightFormat::kBf16);
  for (const auto& [name, t] : s.int4.tensors) {
    EXPECT_EQ(i4.at(name).int4.q, t.int4.q) << projection_name(name);
    EXPECT_EQ(i4.at(name).int4.scale, t.int4.scale);
    EXPECT_EQ(i4.at(name).int4.group, t.int4.group);
    EXPECT_EQ(i4.at(name).method, "rtn");
    EXPECT_EQ(f8.at(name).fp8.w, s.fp8.at(name).fp8.w);
    EXPECT_EQ(f8.at(name).fp8.scale, s.fp8.at(name).fp8.scale);
    EXPECT_EQ(f8.at(name).fp8.folded_gain, s.fp8.at(name).fp8.folded_gain);
    EXPECT_EQ(b16.at(name).bf16, s.bf16.at(name).bf16);
  }
  EXPECT_EQ(f8.fp8_initial_amax.at(SiteId{0, InputSite::kAttnIn}), 12.5f);
  // The INT4 bytes in the file are the kernels' fragment order (pack_int4).
  const json& e = [&]() -> const json& {
    for (const json& t : f.header()["tensors"])
      if (t["name"] == "blk.1.ffn_down" && t["format"] == "int4") return t;
    throw std::runtime_error("missing");
  }();
  const quant::Int4Packed p = quant::pack_int4(s.int4.at({1, Projection::kDown}).int4);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + 16, 8);
  const uint64_t data = (24 + header_bytes + 63) / 64 * 64;
  EXPECT_EQ(
      0, std::memcmp(bytes.data() + data + e["offset"].get<uint64_t>(), p.weights.data(), p.weights.size()));
  EXPECT_EQ((data + e["offset"].get<uint64_t>()) % 64, 0u);

  // The model view: config, tokenizer, BF16 non-projection tensors, projections from INT4.
  const Model back = f.to_model(true);
  EXPECT_EQ(back.format, "futr");
  EXPECT_EQ(back.config.hidden, m.config.hidden);
  EXPECT_EQ(back.tokenizer.tokens, m.tokenizer.tokens);
  EXPECT_EQ(back.tokenizer.merges, m.tokenizer.merges);
  EXPECT_EQ(back.tokenizer.chat_template, m.tokenizer.chat_template);
  EXPECT_EQ(back.tokenizer.ignore_merges, std::optional<bool>(true));
  EXPECT_EQ(back.weights.layers[1].w_down.data,
            quant::dequantize_int4(s.int4.at({1, Projection::kDown}).int4));
  for (size_t i = 0; i < m.weights.tok_embd.data.size(); i += 101)
    EXPECT_EQ(back.weights.tok_embd.data[i], round_bf16(m.weights.tok_embd.data[i]));
  EXPECT_FALSE(back.sources.empty());
  // Only FP8 stored: the folded gain is divided back out.
  const std::vector<uint8_t> only8 = futr_bytes(m, {&s.fp8});
  const Model m8 = FutrFile(only8, "f.futr").to_model(true);
  const quant::QuantizedTensor& qk = s.fp8.at({0, Projection::kK});
  const float g = round_bf16(m.weights.layers[0].attn_norm.data[3]);
  EXPECT_FLOAT_EQ(m8.weights.layers[0].wk.data[3], qk.fp8.dequant(0, 3) / g);
}

// The oldest reader a file asks for (bytes 12..15).
uint32_t min_reader_of(const std::vector<uint8_t>& bytes) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + 12, 4);
  return v;
}

// Version 2: the q/k/v biases (FP32) and a SentencePiece tokenizer's scores
// and dummy-prefix rules come back as written; such a file asks for a version
// 2 reader (a version 1 reader would run without them), any other for 1.
TEST(FutrFile, BiasesAndSentencePieceTokenizerRoundTrip) {
  {
    const Model m = tiny();
    const Sets s = quantize_all(m);
    const std::vector<uint8_t> plain = futr_bytes(m, {&s.int4});
    EXPECT_EQ(min_reader_of(plain), 1u);
    const Model back = FutrFile(plain, "p.futr").to_model(true);
    EXPECT_FALSE(back.config.qkv_bias);
    EXPECT_TRUE(back.tokenizer.scores.empty());
  }
  ModelConfig cfg = test::quant_config();
  cfg.arch = "qwen2";
  cfg.qkv_bias = true;
  Model m = test::random_model(cfg, 12);
  m.tokenizer = tiny().tokenizer;
  m.tokenizer.model = "llama";
  m.tokenizer.unk = 2;  // (no byte tokens in this vocabulary)
  m.tokenizer.scores.clear();
  for (size_t i = 0; i < m.tokenizer.tokens.size(); ++i) m.tokenizer.scores.push_back(-0.25f * float(i));
  m.tokenizer.add_space_prefix = true;
  m.tokenizer.space_prefix_first_only = true;
  m.tokenizer.space_prefix_unless_space = true;
  cpu::QuantizeOptions qo;
  qo.format = WeightFormat::kInt4;
  const quant::QuantizedWeights q = cpu::quantize_model(m, qo, {});
  const std::vector<uint8_t> bytes = futr_bytes(m, {&q});
  EXPECT_EQ(min_reader_of(bytes), 2u);
  const FutrFile f(bytes, "q.futr");
  const Model back = f.to_model(true);
  EXPECT_EQ(back.config.arch, "qwen2");
  EXPECT_TRUE(back.config.qkv_bias);
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    EXPECT_EQ(back.weights.layers[l].bq.data, m.weights.layers[l].bq.data) << l;  // FP32: exact
    EXPECT_EQ(back.weights.layers[l].bk.data, m.weights.layers[l].bk.data) << l;
    EXPECT_EQ(back.weights.layers[l].bv.data, m.weights.layers[l].bv.data) << l;
  }
  EXPECT_EQ(back.tokenizer.model, "llama");
  EXPECT_EQ(back.tokenizer.scores, m.tokenizer.scores);
  EXPECT_TRUE(back.tokenizer.space_prefix_first_only);
  EXPECT_TRUE(back.tokenizer.space_prefix_unless_space);
  // A bias missing from the table, or one in a model without biases: refused by name.
  EXPECT_FUTR_ERROR(FutrFile(with_header(bytes,
                                         [](json& h) {
                                           json& t = h["tensors"];
                                           for (size_t i = 0; i < t.size(); ++i)
                                             if (t[i]["name"] == "blk.1.attn_k.bias") t.erase(i--);
                                         }),
                             "q.futr")
                        .to_model(true),
                    "q.futr: tensor 'blk.1.attn_k.bias' is missing");
  EXPECT_FUTR_ERROR(FutrFile(with_header(bytes,
                                         [](json& h) {
                                           h["config"]["qkv_bias"] = false;
                                           h["config"]["arch"] = "llama";
                                         }),
                             "l.futr")
                        .to_model(false),
                    "unexpected tensor 'blk.0.attn_q.bias'");
  // Scores of another length than the vocabulary: refused.
  EXPECT_FUTR_ERROR(
      FutrFile(with_header(bytes, [](json& h) { h["tokenizer"]["scores"]["count"] = 3; }), "s.futr")
          .to_model(false),
      "tokenizer.scores has 3 entries");
}

TEST(FutrFile, LoaderDispatchAndFiles) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const auto path = tmp("model.futr");
  write_futr(path, m, {&s.int4});
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  EXPECT_TRUE(is_futr_file(path));
  EXPECT_EQ(detect_model_format(path), ModelFormat::kFutr);
  const Model loaded = load_model(path);
  EXPECT_EQ(loaded.format, "futr");
  EXPECT_EQ(loaded.weights.layers.size(), size_t(m.config.n_layers));
  const Model meta = inspect_model(path);
  EXPECT_TRUE(meta.weights.layers.empty());
  EXPECT_EQ(load_tokenizer_spec(path).tokens, m.tokenizer.tokens);
  EXPECT_FUTR_ERROR(FutrFile(path).read_weights(WeightFormat::kFp8), "holds no fp8 weights");
  std::filesystem::remove(path);
}

TEST(FutrFile, Versions) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  FutrWriteOptions o;
  // A newer writer that stays readable (only added fields): loads.
  o.version = kFutrFormatVersion + 1;
  o.min_reader_version = 1;
  const auto newer_ok = futr_bytes(m, {&s.int4}, o);
  EXPECT_EQ(FutrFile(newer_ok, "n.futr").version(), kFutrFormatVersion + 1);
  EXPECT_NO_THROW(FutrFile(newer_ok, "n.futr").to_model(true));
  // A newer writer that breaks old readers: a clear error.
  o.min_reader_version = kFutrFormatVersion + 1;
  EXPECT_FUTR_ERROR(
      FutrFile(futr_bytes(m, {&s.int4}, o), "new.futr"),
      fmt::format("new.futr: .futr format version {0} needs a reader of version >= {0}; this futr "
                  "reads versions 1..{1}",
                  kFutrFormatVersion + 1, kFutrFormatVersion));
  o.version = 0;
  o.min_reader_version = 0;
  EXPECT_FUTR_ERROR(FutrFile(futr_bytes(m, {&s.int4}, o), "z.futr"), "format version 0 is invalid");
}

TEST(FutrFile, TruncatedAnywhere) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> full = futr_bytes(m, {&s.int4, &s.fp8});
  for (size_t len = 0; len < full.size(); len += (len < 4096 ? 7 : 997)) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + long(len));
    try {
      FutrFile f(cut, "cut.futr");
      f.to_model(true);
      f.read_weights(WeightFormat::kFp8);
      ADD_FAILURE() << "no error for a file cut to " << len << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cut.futr: ", 0), 0u) << e.what();
    }
  }
}

TEST(FutrFile, HostileHeaders) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> good = futr_bytes(m, {&s.int4});
  auto expect = [&](std::vector<uint8_t> b, const std::string& msg) {
    try {
      FutrFile f(b, "bad.futr");
      f.to_model(true);
      f.read_weights(WeightFormat::kInt4);
      ADD_FAILURE() << "no error, expected: " << msg;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("bad.futr: ", 0), 0u) << e.what();
    }
  };
  std::vector<uint8_t> b = good;
  b[1] = 'X';
  expect(b, "not a .futr file (bad magic)");
  b = good;
  const uint64_t huge = 1ull << 40;
  std::memcpy(b.data() + 16, &huge, 8);
  expect(b, "header of 1099511627776 bytes is impossible");
  b = good;
  uint64_t hb = 0;
  std::memcpy(&hb, b.data() + 16, 8);
  b[24 + hb - 1] = ',';  // the closing brace
  expect(b, "not valid JSON");
  auto edit = [&](const std::function<void(json&)>& f) { return with_header(good, f); };
  expect(edit([](json& h) { h["tensors"][0]["offset"] = uint64_t(1) << 50; }),
         "lies past the end of the file");
  expect(edit([](json& h) { h["tensors"][0]["bytes"] = 12; }), "has 12 bytes, its shape needs");
  expect(edit([](json& h) { h["config"]["hidden"] = -5; }), "hidden = -5 is out of range");
  expect(edit([](json& h) { h["config"]["arch"] = "gpt2"; }), "unsupported architecture 'gpt2'");
  expect(edit([](json& h) { h["config"].erase("vocab"); }), "bad .futr header");
  expect(edit([](json& h) { h["tokenizer"]["tokens"]["count"] = 1u << 30; }), "strings cannot fit");
  expect(edit([](json& h) { h["tokenizer"]["bos"] = 99; }), "special token id 99 out of range");
  expect(edit([](json& h) {
           for (json& t : h["tensors"])
             if (t["name"] == "blk.0.attn_q") t["shape"] = {64, 128};
         }),
         "tensor 'blk.0.attn_q' has 8192 bytes, its shape needs 4096");
  expect(edit([](json& h) {
           for (json& t : h["tensors"])
             if (t["name"] == "blk.1.ffn_up") t["name"] = "blk.1.ffn_upx";
         }),
         "unexpected int4 tensor 'blk.1.ffn_upx'");
  expect(edit([](json& h) {
           json kept = json::array();
           for (json& t : h["tensors"])
             if (t["name"] != "blk.1.ffn_up") kept.push_back(t);
           h["tensors"] = kept;
         }),
         "lack tensor 'blk.1.ffn_up'");
  expect(edit([](json& h) {
           for (json& t : h["tensors"])
             if (t["name"] == "blk.0.attn_k") t["group"] = 96;
         }),
         "group size 96 not supported");
  expect(edit([](json& h) { h["tensors"][1]["kind"] = "q8_0"; }), "unknown kind 'q8_0'");
  expect(edit([](json& h) { h["tensors"][0]["shape"] = {0, 3}; }), "dimension 0 = 0");
  expect(edit([](json& h) { h["format"] = "gguf"; }), "does not say format");
  expect(edit([](json& h) { h["format"] = 5; }), "does not say format");
}

// The .futr reader is as strict as the GGUF reader. Each
// edit of a good header gets a futr::Error naming the file and the problem.
TEST(FutrFile, StrictHeaderTable) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> good = futr_bytes(m, {&s.int4, &s.fp8});
  auto entry = [](json& h, const std::string& name, const std::string& format) -> json& {
    for (json& t : h["tensors"])
      if (t["name"] == name && t.value("format", std::string()) == format) return t;
    throw std::runtime_error("no tensor " + name);
  };
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"1e300 in an int field", [](json& h) { h["config"]["hidden"] = 1e300; },
       "config.hidden = 1e+300 is not an integer in range"},
      {"2^32 + 64 in an int field", [](json& h) { h["config"]["n_layers"] = (uint64_t(1) << 32) + 64; },
       "config.n_layers = 4294967360 is out of range (1..2147483647)"},
      {"fractional int", [](json& h) { h["config"]["vocab"] = 101.5; },
       "config.vocab = 101.5 is not an integer"},
      {"rope_theta 1e300 (inf as float)", [](json& h) { h["config"]["rope_theta"] = 1e300; },
       "config.rope_theta = 1e+300 is out of range"},
      {"rope_theta 1e30", [](json& h) { h["config"]["rope_theta"] = 1e30; },
       "rope_theta 1e+30 is out of range"},
      {"rms_eps negative", [](json& h) { h["config"]["rms_eps"] = -1; }, "rms_eps -1 is out of range"},
      {"llama3 factor 0",
       [](json& h) {
         h["config"]["rope_scaling"]["type"] = "llama3";
         h["config"]["rope_scaling"]["factor"] = 0.0;
       },
       "rope_scaling factor 0 is out of range"},
      {"string for a number", [](json& h) { h["config"]["rms_eps"] = "small"; },
       "config.rms_eps must be a number, found \"small\""},
      {"offset 2^64-1", [&](json& h) { entry(h, "blk.0.attn_q", "int4")["offset"] = UINT64_MAX; },
       "lies past the end of the file"},
      {"negative offset", [&](json& h) { entry(h, "blk.0.attn_q", "int4")["offset"] = -64; },
       "offset = -64 is out of range"},
      {"unaligned offset", [&](json& h) { entry(h, "blk.0.attn_q", "int4")["offset"] = 65; },
       "not a multiple of 64"},
      {"overlapping blobs",
       [&](json& h) {
         entry(h, "blk.0.attn_k", "int4")["offset"] = entry(h, "blk.0.attn_q", "int4")["offset"];
       },
       "overlaps"},
      {"scales over the weights",
       [&](json& h) {
         json& t = entry(h, "blk.1.ffn_up", "fp8");
         t["scale_offset"] = t["offset"];
       },
       "overlaps"},
      {"tokenizer strings over a tensor",
       [&](json& h) { h["tokenizer"]["merges"]["offset"] = entry(h, "token_embd", "")["offset"]; },
       "overlaps"},
      {"duplicate tensor", [](json& h) { h["tensors"].push_back(h["tensors"][3]); },
       "appears twice in the header"},
      {"folded_gain on attn_output",
       [&](json& h) { entry(h, "blk.0.attn_output", "fp8")["folded_gain"] = true; },
       "tensor 'blk.0.attn_output' has folded_gain, but its input is not the normed hidden state"},
      {"folded_gain on ffn_down", [&](json& h) { entry(h, "blk.1.ffn_down", "fp8")["folded_gain"] = true; },
       "'blk.1.ffn_down' has folded_gain"},
      {"token types of the wrong count",
       [](json& h) {
         h["tokenizer"]["token_types"] = json::array({1, 1});
       },
       "token_types must be an array of 98 token types"},
      {"token type out of range",
       [](json& h) {
         h["tokenizer"]["token_types"] = json(std::vector<int>(98, 1));
         h["tokenizer"]["token_types"][5] = 99;
       },
       "tokenizer.token_types = 99 is out of range (0..6)"},
      {"special id 2^32", [](json& h) { h["tokenizer"]["eos"] = uint64_t(1) << 32; },
       "tokenizer.eos = 4294967296 is out of range"},
      {"extra_eos out of range", [](json& h) { h["tokenizer"]["extra_eos"] = json::array({500}); },
       "special token id 500 out of range"},
      {"trailing bytes in a string blob", [](json& h) { h["tokenizer"]["merges"]["count"] = 0; },
       "bytes after the last of its 0 strings"},
      {"amax inf", [](json& h) { h["weight_sets"][1]["fp8_initial_amax"]["blk.1.ffn_in"] = 1e300; },
       "fp8_initial_amax['blk.1.ffn_in'] = 1e+300 is out of range"},
      {"group 2^40", [&](json& h) { entry(h, "blk.0.attn_v", "int4")["group"] = uint64_t(1) << 40; },
       "group = 1099511627776 is out of range"},
      {"unknown projection", [&](json& h) { entry(h, "blk.1.ffn_up", "int4")["name"] = "blk.7.ffn_up"; },
       "unexpected int4 tensor 'blk.7.ffn_up' (not a projection of this model's 2 layers)"},
      {"name not a string", [](json& h) { h["tensors"][0]["name"] = 7; }, "a tensor entry has no name"},
      {"escape sequence in a name",
       [](json& h) {
         h["tensors"][0]["name"] = "\x1b]0;owned\x07";
         h["tensors"][0]["kind"] = "q8_0";
       },
       "tensor '\\x1b]0;owned\\x07' has unknown kind 'q8_0'"},
      {"unsupported tokenizer (validated before the weights)",
       [](json& h) { h["tokenizer"]["pre"] = "nonsense"; }, "bad.futr: tokenizer: pre-tokenizer 'nonsense'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    try {
      // NOTE: FutrFile keeps a span of the caller's bytes: they must outlive it
      // (a temporary here was a use-after-free, found by the ASan suite).
      const std::vector<uint8_t> bytes = with_header(good, c.edit);
      const FutrFile f(bytes, "bad.futr");
      f.read_weights(WeightFormat::kFp8);
      f.read_weights(WeightFormat::kInt4);
      f.to_model(true);
      ADD_FAILURE() << "no error, expected: " << c.error;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.error), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("bad.futr", 0), 0u) << e.what();
    }
  }
}

// Class 1: a header nested 200,000 deep is refused by the depth limit (no
// stack overflow while parsing or formatting the error).
TEST(FutrFile, DeeplyNestedHeader) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  std::vector<uint8_t> b = futr_bytes(m, {&s.int4});
  const std::string deep =
      "{\"format\": \"futr\", \"x\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  std::vector<uint8_t> out(b.begin(), b.begin() + 24);
  const uint64_t n = deep.size();
  std::memcpy(out.data() + 16, &n, 8);
  out.insert(out.end(), deep.begin(), deep.end());
  out.resize((out.size() + 63) / 64 * 64, 0);
  EXPECT_FUTR_ERROR(FutrFile(out, "deep.futr"),
                    "deep.futr: the .futr header: JSON nested deeper than 64 levels");
}

// Class 4: non-finite weights and scales are refused at load, naming the tensor.
TEST(FutrFile, NonFiniteValuesNameTheTensor) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  auto poke = [](std::vector<uint8_t> b, const std::string& name, const std::string& format, const char* key,
                 size_t at, std::vector<uint8_t> val) {
    uint64_t hb = 0;
    std::memcpy(&hb, b.data() + 16, 8);
    const json h = json::parse(b.begin() + 24, b.begin() + 24 + long(hb));
    const uint64_t data = (24 + hb + 63) / 64 * 64;
    for (const json& t : h["tensors"])
      if (t["name"] == name && t.value("format", std::string()) == format)
        std::memcpy(b.data() + data + t[key].get<uint64_t>() + at, val.data(), val.size());
    return b;
  };
  const auto i4 = futr_bytes(m, {&s.int4}), f8 = futr_bytes(m, {&s.fp8}), b16 = futr_bytes(m, {&s.bf16});
  EXPECT_FUTR_ERROR(FutrFile(poke(i4, "blk.0.attn_k", "int4", "scale_offset", 2, {0x00, 0x7c}), "x.futr")
                        .read_weights(WeightFormat::kInt4),
                    "x.futr: tensor 'blk.0.attn_k' has a non-finite INT4 scale (#1)");
  EXPECT_FUTR_ERROR(FutrFile(poke(f8, "blk.1.ffn_gate", "fp8", "offset", 5, {0x7f}), "x.futr").to_model(true),
                    "tensor 'blk.1.ffn_gate' holds an E4M3 NaN (element 5)");
  EXPECT_FUTR_ERROR(
      FutrFile(poke(f8, "blk.1.ffn_gate", "fp8", "scale_offset", 0, {0, 0, 0xc0, 0x7f}), "x.futr")
          .to_model(true),
      "tensor 'blk.1.ffn_gate' has FP8 scale nan (row 0), outside");
  EXPECT_FUTR_ERROR(
      FutrFile(poke(b16, "blk.0.ffn_up", "bf16", "offset", 4, {0x80, 0x7f}), "x.futr").to_model(true),
      "tensor 'blk.0.ffn_up' holds a non-finite value (element 2)");
  EXPECT_FUTR_ERROR(FutrFile(poke(i4, "output_norm", "", "offset", 0, {0xc0, 0xff}), "x.futr").to_model(true),
                    "tensor 'output_norm' holds a non-finite value");
}

// FP8 scales and calibrated amax values are finite, positive and within what
// weights and activations can be (quant/fp8_weights.h, quant/delayed_scaling.h);
// the message names the file, the tensor (row) or site, and the value. The
// bounds themselves load.
TEST(FutrFile, Fp8ScalesAndAmaxAreRangeChecked) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> good = futr_bytes(m, {&s.fp8});
  auto scale_at = [&](size_t row, float v) {
    std::vector<uint8_t> b = good;
    uint64_t hb = 0;
    std::memcpy(&hb, b.data() + 16, 8);
    const json h = json::parse(b.begin() + 24, b.begin() + 24 + long(hb));
    const uint64_t data = (24 + hb + 63) / 64 * 64;
    for (const json& t : h["tensors"])
      if (t["name"] == "blk.1.attn_v" && t.value("format", std::string()) == "fp8")
        std::memcpy(b.data() + data + t["scale_offset"].get<uint64_t>() + row * 4, &v, 4);
    return b;
  };
  const struct {
    float v;
    const char* error;
  } scales[] = {{0.0f, "scale 0 (row 2)"},        {-1.0f, "scale -1 (row 2)"},
                {1e-40f, "scale 1e-40 (row 2)"},  {1e30f, "scale 1e+30 (row 2)"},
                {INFINITY, "scale inf (row 2)"},  {0x1p-65f, "scale 2.7105054e-20 (row 2)"},
                {0x1p17f, "scale 131072 (row 2)"}};
  for (const auto& c : scales) {
    SCOPED_TRACE(c.error);
    const std::vector<uint8_t> b = scale_at(2, c.v);
    const std::string e = error_of([&] { FutrFile(b, "x.futr").to_model(true); });
    EXPECT_NE(e.find("x.futr: tensor 'blk.1.attn_v' has FP8 "), std::string::npos) << e;
    EXPECT_NE(e.find(c.error), std::string::npos) << e;
  }
  for (float ok : {quant::kFp8MinWeightScale, quant::kFp8MaxWeightScale}) {
    const std::vector<uint8_t> b = scale_at(2, ok);
    EXPECT_NO_THROW(FutrFile(b, "x.futr").to_model(true));
  }

  auto amax = [&](json v) {
    return with_header(good, [&](json& h) { h["weight_sets"][0]["fp8_initial_amax"]["blk.0.attn_in"] = v; });
  };
  for (const json& v : {json(0.0), json(-3.0), json(1e-30), json(1e9), json(1e300), json("12")}) {
    SCOPED_TRACE(v.dump());
    const std::vector<uint8_t> b = amax(v);
    const std::string e = error_of([&] { FutrFile(b, "x.futr").read_weights(WeightFormat::kFp8); });
    EXPECT_EQ(e.rfind("x.futr: fp8_initial_amax['blk.0.attn_in']", 0), 0u) << e;
  }
  for (float ok : {quant::kFp8MinCalibratedAmax, quant::kFp8MaxCalibratedAmax}) {
    const std::vector<uint8_t> b = amax(ok);
    EXPECT_EQ(
        FutrFile(b, "x.futr").read_weights(WeightFormat::kFp8).fp8_initial_amax.at({0, InputSite::kAttnIn}),
        ok);
  }
  // The writer never writes what the reader refuses.
  quant::QuantizedWeights bad = s.fp8;
  bad.fp8_initial_amax[SiteId{1, InputSite::kOIn}] = 0.0f;
  EXPECT_FUTR_ERROR(futr_bytes(m, {&bad}), "calibrated amax 0 of site 'blk.1.o_in' is outside");
  bad = s.fp8;
  bad.tensors.begin()->second.fp8.scale[0] = 1e30f;
  EXPECT_FUTR_ERROR(futr_bytes(m, {&bad}), "has FP8 scale 1e+30, outside");
}

// Every tensor of a .futr is one the model uses, as the GGUF and Hugging Face
// readers require: a tensor of another architecture, a layer beyond the
// config, an LM head the config ties away, or projections in a format no
// weight set lists are refused by name (before: loaded and ignored).
TEST(FutrFile, TensorsTheModelDoesNotUseAreRefused) {
  Model m = tiny();
  m.config.tied_embeddings = false;  // an LM head of its own, so that a config can tie it away
  m.weights.lm_head = m.weights.tok_embd;
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> good = futr_bytes(m, {&s.int4, &s.fp8});
  // An extra entry with an empty blob (no overlap with the others).
  auto extra = [](const std::string& name, const std::string& format) {
    return [=](json& h) {
      json e = {{"name", name}, {"kind", "f32"}, {"shape", {1}}, {"offset", 0}, {"bytes", 0}};
      if (!format.empty()) {
        e["kind"] = "bf16";
        e["shape"] = {1, 1};
        e["format"] = format;
      }
      h["tensors"].push_back(e);
    };
  };
  const struct {
    const char* what;
    std::function<void(json&)> edit;
    const char* error;
  } cases[] = {
      {"rope_freqs", extra("rope_freqs", ""),
       "unexpected tensor 'rope_freqs' (not a tensor of this model's 2 layers)"},
      {"a norm of layer 2", extra("blk.2.attn_norm", ""), "unexpected tensor 'blk.2.attn_norm'"},
      {"a dense projection", extra("blk.0.attn_q", ""), "unexpected tensor 'blk.0.attn_q'"},
      {"a projection of layer 9", extra("blk.9.attn_q", "int4"), "unexpected int4 tensor 'blk.9.attn_q'"},
      {"another architecture's projection", extra("blk.0.attn_qkv", "fp8"),
       "unexpected fp8 tensor 'blk.0.attn_qkv'"},
      {"a format without its set", extra("blk.0.attn_q", "bf16"),
       "tensor 'blk.0.attn_q' is stored as 'bf16', but no weight set of that format is listed"},
      {"a set removed", [](json& h) { h["weight_sets"].erase(1); },
       "is stored as 'fp8', but no weight set of that format is listed"},
      {"an LM head the config ties away", [](json& h) { h["config"]["tied_embeddings"] = true; },
       "unexpected tensor 'output' (the config ties the LM head to the embeddings)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::vector<uint8_t> b = with_header(good, c.edit);
    const FutrFile f(b, "extra.futr");
    for (bool weights : {false, true}) {
      const std::string e = error_of([&] { f.to_model(weights); });
      EXPECT_NE(e.find(c.error), std::string::npos) << e;
      EXPECT_EQ(e.rfind("extra.futr: ", 0), 0u) << e;
    }
  }
  EXPECT_NO_THROW(FutrFile(good, "good.futr").to_model(true));
}

// A config that disagrees with the file's own tensor table is refused before
// anything of the config's size is allocated: vocab 2^22 in a header whose
// token_embd holds the tiny model's rows (before: 2^22 x hidden floats were
// allocated first, GBs from a small file). Checked in a child process whose
// address space may grow by 1 GiB at most.
TEST(FutrFile, ConfigShapesCheckedAgainstTheTableBeforeAllocating) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> bytes =
      with_header(futr_bytes(m, {&s.int4}), [](json& h) { h["config"]["vocab"] = 1 << 22; });
  ASSERT_GE(uint64_t(1 << 22) * uint64_t(m.config.hidden) * 4, uint64_t(1) << 30);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    uint64_t pages = 0;  // the address space in use now, plus 1 GiB
    if (FILE* f = fopen("/proc/self/statm", "r")) {
      if (fscanf(f, "%lu", &pages) != 1) pages = 0;
      fclose(f);
    }
    const rlim_t cap = rlim_t(pages * uint64_t(sysconf(_SC_PAGESIZE)) + (uint64_t(1) << 30));
    rlimit r{cap, cap};
    setrlimit(RLIMIT_AS, &r);
    try {
      FutrFile f(bytes, "big.futr");
      f.to_model(true);
      _exit(3);
    } catch (const Error& e) {
      _exit(std::string(e.what()).find("big.futr: tensor 'token_embd' has the wrong shape") !=
                    std::string::npos
                ? 0
                : 4);
    } catch (const std::bad_alloc&) {
      _exit(2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: allocated first; 3: accepted; 4: another message";
}

// The writer never follows a planted OUT.tmp link (nor touches OUT.tmp at
// all: the temporary has a unique name) and leaves no temporary behind.
TEST(FutrFile, WriterNeverFollowsAPlantedTmpLink) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const auto dir = tmp("linkdir");
  std::filesystem::create_directories(dir);
  const auto victim = dir / "victim.txt";
  std::ofstream(victim) << "precious";
  const auto out = dir / "m.futr";
  std::filesystem::create_symlink(victim, out.string() + ".tmp");
  write_futr(out, m, {&s.int4});
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
  EXPECT_TRUE(std::filesystem::is_symlink(out.string() + ".tmp"));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 3);  // victim, the link, the output
  EXPECT_NO_THROW(load_futr_model(out, true));
  std::filesystem::remove_all(dir);
}

// Class 5: write_futr never replaces a non-regular file and leaves no .tmp behind.
TEST(FutrFile, WriterRefusesNonRegularOutputs) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  EXPECT_FUTR_ERROR(write_futr("/dev/null", m, {&s.int4}),
                    "/dev/null: is a character device; the .futr output must be");
  const auto dir = tmp("outdir");
  std::filesystem::create_directories(dir);
  EXPECT_FUTR_ERROR(write_futr(dir, m, {&s.int4}), "is a directory");
  // A failure while writing (here: the .tmp's directory is missing) leaves nothing.
  const auto missing = dir / "no" / "such" / "m.futr";
  EXPECT_FUTR_ERROR(write_futr(missing, m, {&s.int4}), "cannot open for writing");
  EXPECT_FALSE(std::filesystem::exists(missing.string() + ".tmp"));
  std::filesystem::remove_all(dir);
}
