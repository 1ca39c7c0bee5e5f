// Writes the seed corpus of the fuzz targets (fuzz/corpus/*), using the test
// writers of tests/formats/. Run once after a format change:
//   build-fuzz/bin/futr_fuzz_make_seeds fuzz/corpus
// The hf_config seeds are the config.json files of tests/data/hf_tiny/* plus
// a transformers-v4 style config written here; the futr seeds are a micro
// model (hidden 64, one layer, a 100-token byte-level vocabulary) in each
// weight format; the tokenizer_json seeds are small tokenizer.json files of
// each supported pre-tokenizer structure.
#include <cmath>
#include <filesystem>
#include <iostream>

#include "cpu_engine/tiny_model.h"
#include "formats/futr_file.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors_writer.h"
#include "quantize/quantize.h"
#include "tokenizer/patterns.h"
#include "tokenizer/test_util.h"

#include <nlohmann/json.hpp>

using namespace futr::test;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " CORPUS_DIR\n";
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* d : {"gguf", "safetensors", "hf_config", "futr", "tokenizer_json"})
    fs::create_directories(out / d);
  // The 95 printable ASCII bytes as byte-level tokens (space is U+0120), the
  // least a vocabulary needs to pass the tokenizer's check, then extras.
  auto byte_tokens = [](std::vector<std::string> extra) {
    std::vector<std::string> t = {"\xc4\xa0"};
    for (int b = 0x21; b < 0x7f; ++b) t.push_back(std::string(1, char(b)));
    t.insert(t.end(), extra.begin(), extra.end());
    return t;
  };

  // GGUF: a micro llama (one layer, hidden 32) in each matrix type, with a tokenizer.
  for (uint32_t type : {uint32_t(T_F32), uint32_t(T_F16), uint32_t(T_BF16), uint32_t(T_Q8_0),
                        uint32_t(T_Q4_0), uint32_t(T_Q4_1)}) {
    TinyLlama m;
    m.hidden = 32, m.layers = 1, m.heads = 2, m.kv_heads = 1, m.head_dim = 16, m.inter = 32;
    m.vocab = type == T_Q4_1 ? 99 : 8, m.ctx = 64;
    m.tied = type != T_F32;
    m.make(type);
    GgufWriter g = m.writer(type);
    if (type == T_Q4_1) {
      g.version = 2;
      g.set_alignment(64);
      g.add_string("tokenizer.ggml.model", "gpt2");
      const std::vector<std::string> toks = byte_tokens({"ab", "<s>", "</s>", "x y"});
      std::vector<int32_t> types(toks.size(), 1);
      types[96] = types[97] = 3;
      g.add_string_array("tokenizer.ggml.tokens", toks);
      g.add_i32_array("tokenizer.ggml.token_type", types);
      g.add_string_array("tokenizer.ggml.merges", {"a b"});
      g.add_u32("tokenizer.ggml.bos_token_id", 96);
      g.add_u32("tokenizer.ggml.eos_token_id", 97);
      g.add_bool("tokenizer.ggml.add_bos_token", true);
      g.add_string("tokenizer.chat_template", "{{ messages }}");
    }
    if (type == T_F16) {
      // llama3 factors for theta 10000, head_dim 16, factor 8, low 1, high 4, original context 64.
      std::vector<float> r(8);
      for (int i = 0; i < 8; ++i) {
        const double wl = 2 * 3.141592653589793 * std::pow(10000.0, 2.0 * i / 16);
        const double s = (64 / wl - 1) / 3;
        r[size_t(i)] = wl < 16 ? 1.0f : wl > 64 ? 8.0f : float(1 / ((1 - s) / 8 + s));
      }
      g.add_u32("llama.rope.scaling.original_context_length", 64);
      g.add_f32_tensor("rope_freqs.weight", {8}, r);
    }
    g.write(out / "gguf" / ("micro_llama_type" + std::to_string(type) + ".gguf"));
  }
  {  // Every metadata value type, nested arrays, no tensors.
    GgufWriter g;
    g.add_raw("u8", U8, GgufWriter::enc(uint8_t(1)));
    g.add_raw("i16", I16, GgufWriter::enc(int16_t(-2)));
    g.add_u64("u64", 3);
    g.add_raw("f64", F64, GgufWriter::enc(4.0));
    g.add_bool("b", false);
    g.add_string("s", "text");
    g.add_i32_array("ints", {1, 2});
    Bytes nested;
    put<uint32_t>(nested, ARR);
    put<uint64_t>(nested, 1);
    put<uint32_t>(nested, STR);
    put<uint64_t>(nested, 1);
    put_str(nested, "x");
    g.add_raw("nested", ARR, nested);
    g.write(out / "gguf" / "all_value_types.gguf");
  }

  // safetensors: every float dtype, metadata, a non-float dtype, an empty tensor.
  write_file(out / "safetensors" / "mixed.safetensors",
             st_bytes({st_from_floats("a", "F32", {2, 2}, {1, 2, 3, 4}),
                       st_from_floats("b", "F16", {3}, {0.5f, -1, 2}),
                       st_from_floats("c", "BF16", {1, 2}, {7, 8}),
                       {"d", "I8", {2}, {1, 2}},
                       {"e", "F32", {0}, {}}},
                      {{"format", "pt"}}));
  write_file(out / "safetensors" / "empty.safetensors", st_bytes({}));

  // config.json: the test checkpoints and a v4-style Llama 3.1 config.
  const fs::path tiny = fs::path(FUTR_SOURCE_DIR) / "tests/data/hf_tiny";
  for (const auto& e : fs::directory_iterator(tiny))
    fs::copy_file(e.path() / "config.json", out / "hf_config" / (e.path().filename().string() + ".json"),
                  fs::copy_options::overwrite_existing);
  write_text(out / "hf_config" / "llama31_v4.json", R"({"architectures": ["LlamaForCausalLM"],
 "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
 "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
 "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": false})");
  // .futr: a micro model in each weight format (and int4 + fp8 together).
  {
    futr::ModelConfig c;
    c.name = "micro";
    c.hidden = 64, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 32, c.intermediate = 64;
    c.vocab = 100, c.max_context = 64, c.tied_embeddings = true;
    futr::Model m = random_model(c, 5);
    m.tokenizer.tokens = byte_tokens({"ab", "<s>", "</s>", "<|im_end|>", "x"});
    m.tokenizer.token_types.assign(m.tokenizer.tokens.size(), 1);
    m.tokenizer.token_types[96] = m.tokenizer.token_types[97] = m.tokenizer.token_types[98] = 3;
    m.tokenizer.merges = {"a b"};
    m.tokenizer.bos = 96, m.tokenizer.eos = 97, m.tokenizer.extra_eos = {98};
    m.tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
    futr::cpu::QuantizeOptions o;
    o.format = futr::WeightFormat::kInt4;
    const auto i4 = futr::cpu::quantize_model(m, o, {});
    o.format = futr::WeightFormat::kFp8;
    const auto f8 = futr::cpu::quantize_model(m, o, {});
    o.format = futr::WeightFormat::kBf16;
    const auto b16 = futr::cpu::quantize_model(m, o, {});
    futr::write_futr(out / "futr" / "micro_int4.futr", m, {&i4});
    futr::write_futr(out / "futr" / "micro_fp8.futr", m, {&f8});
    futr::write_futr(out / "futr" / "micro_bf16.futr", m, {&b16});
    futr::write_futr(out / "futr" / "micro_int4_fp8.futr", m, {&i4, &f8});
  }

  // tokenizer.json: byte-level BPE over the 256-byte alphabet with a few
  // merges and added tokens, in each supported pre-tokenizer structure.
  {
    using nlohmann::json;
    json vocab = json::object();
    std::vector<std::string> all;
    for (int b = 0; b < 256; ++b) all.push_back(byte_level(std::string(1, char(b))));
    for (const char* w : {"he", "ll", "hell", "hello", " the"}) all.push_back(byte_level(w));
    for (size_t i = 0; i < all.size(); ++i) vocab[all[i]] = i;
    const json merges = {byte_level("h") + " " + byte_level("e"), byte_level("l") + " " + byte_level("l"),
                         byte_level("he") + " " + byte_level("ll"),
                         byte_level("hell") + " " + byte_level("o"),
                         byte_level(" ") + " " + byte_level("the")};
    const json added = json::array({{{"id", all.size()}, {"content", "<|im_start|>"}, {"special", true}},
                                    {{"id", all.size() + 1}, {"content", "<|im_end|>"}, {"special", true}},
                                    {{"id", all.size() + 2}, {"content", "<tool>"}, {"special", false}}});
    const json byte_level_pre = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    const json pres[3] = {
        byte_level_pre,
        {{"type", "Sequence"},
         {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level_pre}}},
        {{"type", "Sequence"},
         {"pretokenizers",
          {{{"type", "Split"},
            {"pattern", {{"Regex", futr::pretok::kLlama3Pattern}}},
            {"behavior", "Isolated"},
            {"invert", false}},
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", false}}}}}};
    const char* names[3] = {"gpt2", "smollm", "llama3"};
    for (int i = 0; i < 3; ++i) {
      json t = {{"version", "1.0"},
                {"added_tokens", added},
                {"normalizer", nullptr},
                {"pre_tokenizer", pres[i]},
                {"post_processor",
                 {{"type", "TemplateProcessing"},
                  {"single",
                   {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
                {"decoder", {{"type", "ByteLevel"}}},
                {"model",
                 {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"byte_fallback", false},
                  {"ignore_merges", i == 2},
                  {"vocab", vocab},
                  {"merges", merges}}}};
      write_text(out / "tokenizer_json" / (std::string(names[i]) + ".json"), t.dump(1));
    }
  }
  std::cout << "seeds written to " << out << "\n";
  return 0;
}
