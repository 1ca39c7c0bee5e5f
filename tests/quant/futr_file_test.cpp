// The .futr model file (src/formats/futr_file.h): round trip of every weight
// format (kernel-native packing included), loader dispatch, and hostile or
// broken files (truncation anywhere, bad magic, versions, corrupted header,
// offsets and sizes out of range, wrong shapes, missing tensors).
#include "formats/futr_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/numeric.h"
#include "cpu/model_quant.h"
#include "cpu/quant_model.h"
#include "formats/loader.h"
#include "quant/int4_quant.h"
#include "quant/quant_test_util.h"

using namespace futr;
using nlohmann::json;

namespace {

Model tiny() {
  Model m = test::random_model(test::quant_config(), 11);
  m.tokenizer.tokens = {"a", "b", "\xff\xfe", ""};  // bytes that are not UTF-8 survive
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
  s.fp8.fp8_initial_amax["blk.0.attn_in"] = 12.5f;
  o.format = WeightFormat::kBf16;
  s.bf16 = cpu::quantize_model(m, o, {});
  return s;
}

std::filesystem::path tmp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("futr_file_test_" + std::to_string(::getpid()) + "_" + name);
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

}  // namespace

TEST(FutrFile, RoundTripEveryFormat) {
  const Model m = tiny();
  const Sets s = quantize_all(m);
  const std::vector<uint8_t> bytes = futr_bytes(m, {&s.int4, &s.fp8, &s.bf16});
  const FutrFile f(bytes, "t.futr");
  EXPECT_EQ(f.version(), kFutrFormatVersion);
  EXPECT_EQ(f.formats(), (std::vector<WeightFormat>{WeightFormat::kInt4, WeightFormat::kFp8,
                                                           WeightFormat::kBf16}));
  const quant::QuantizedWeights i4 = f.read_weights(WeightFormat::kInt4);
  const quant::QuantizedWeights f8 = f.read_weights(WeightFormat::kFp8);
  const quant::QuantizedWeights b16 = f.read_weights(WeightFormat::kBf16);
  for (const auto& [name, t] : s.int4.tensors) {
    EXPECT_EQ(i4.at(name).int4.q, t.int4.q) << name;
    EXPECT_EQ(i4.at(name).int4.scale, t.int4.scale);
    EXPECT_EQ(i4.at(name).int4.group, t.int4.group);
    EXPECT_EQ(i4.at(name).method, "rtn");
    EXPECT_EQ(f8.at(name).fp8.w, s.fp8.at(name).fp8.w);
    EXPECT_EQ(f8.at(name).fp8.scale, s.fp8.at(name).fp8.scale);
    EXPECT_EQ(f8.at(name).fp8.folded_gain, s.fp8.at(name).fp8.folded_gain);
    EXPECT_EQ(b16.at(name).bf16, s.bf16.at(name).bf16);
  }
  EXPECT_EQ(f8.fp8_initial_amax.at("blk.0.attn_in"), 12.5f);
  // The INT4 bytes in the file are the kernels' fragment order (pack_int4).
  const json& e = [&]() -> const json& {
    for (const json& t : f.header()["tensors"])
      if (t["name"] == "blk.1.ffn_down" && t["format"] == "int4") return t;
    throw std::runtime_error("missing");
  }();
  const quant::Int4Packed p = quant::pack_int4(s.int4.at("blk.1.ffn_down").int4);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + 16, 8);
  const uint64_t data = (24 + header_bytes + 63) / 64 * 64;
  EXPECT_EQ(0, std::memcmp(bytes.data() + data + e["offset"].get<uint64_t>(), p.weights.data(), p.weights.size()));
  EXPECT_EQ((data + e["offset"].get<uint64_t>()) % 64, 0u);

  // The model view: config, tokenizer, BF16 non-projection tensors, projections from INT4.
  const Model back = f.to_model(true);
  EXPECT_EQ(back.format, "futr");
  EXPECT_EQ(back.config.hidden, m.config.hidden);
  EXPECT_EQ(back.tokenizer.tokens, m.tokenizer.tokens);
  EXPECT_EQ(back.tokenizer.merges, m.tokenizer.merges);
  EXPECT_EQ(back.tokenizer.chat_template, m.tokenizer.chat_template);
  EXPECT_EQ(back.tokenizer.ignore_merges, std::optional<bool>(true));
  EXPECT_EQ(back.weights.layers[1].w_down.data, quant::dequantize_int4(s.int4.at("blk.1.ffn_down").int4));
  for (size_t i = 0; i < m.weights.tok_embd.data.size(); i += 101)
    EXPECT_EQ(back.weights.tok_embd.data[i], round_bf16(m.weights.tok_embd.data[i]));
  EXPECT_FALSE(back.sources.empty());
  // Only FP8 stored: the folded gain is divided back out.
  const std::vector<uint8_t> only8 = futr_bytes(m, {&s.fp8});
  const Model m8 = FutrFile(only8, "f.futr").to_model(true);
  const quant::QuantizedTensor& qk = s.fp8.at("blk.0.attn_k");
  const float g = round_bf16(m.weights.layers[0].attn_norm.data[3]);
  EXPECT_FLOAT_EQ(m8.weights.layers[0].wk.data[3], qk.fp8.dequant(0, 3) / g);
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
  EXPECT_FUTR_ERROR(FutrFile(futr_bytes(m, {&s.int4}, o), "new.futr"),
                     "new.futr: .futr format version 2 needs a reader of version >= 2; this futr reads versions 1..1");
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
  expect(edit([](json& h) { h["tensors"][0]["offset"] = uint64_t(1) << 50; }), "lies past the end of the file");
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
         "lack tensor 'blk.1.ffn_up'");
  expect(edit([](json& h) {
           for (json& t : h["tensors"])
             if (t["name"] == "blk.0.attn_k") t["group"] = 96;
         }),
         "group size 96 not supported");
  expect(edit([](json& h) { h["tensors"][1]["kind"] = "q8_0"; }), "unknown kind 'q8_0'");
  expect(edit([](json& h) { h["tensors"][0]["shape"] = {0, 3}; }), "dimension 0 = 0");
  expect(edit([](json& h) { h["format"] = "gguf"; }), "does not say format");
}
