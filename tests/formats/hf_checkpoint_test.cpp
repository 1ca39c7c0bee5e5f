// Hugging Face directory reader: the three transformers-made checkpoints in
// tests/data/hf_tiny (config fields, and weights against an independent read of
// the safetensors files), both RoPE spellings of config.json, tied/untied
// rules, and broken directories written by the test.
#include "formats/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/numeric.h"
#include "formats/gguf_writer.h"
#include "formats/loader.h"
#include "formats/safetensors_writer.h"
#include "support/expect_error.h"

using namespace futr;
using namespace futr::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fs::path kTiny = fs::path(FUTR_TEST_DATA) / "hf_tiny";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// An independent reader for the check: the header via nlohmann::json, values
// converted here. Returns the tensor as FP32 from whichever file holds it.
std::vector<float> read_direct(const fs::path& dir, const std::string& name,
                               std::vector<int64_t>* shape = nullptr) {
  std::vector<fs::path> files;
  if (fs::exists(dir / "model.safetensors")) {
    files.push_back(dir / "model.safetensors");
  } else {
    const json idx = json::parse(slurp(dir / "model.safetensors.index.json"));
    files.push_back(dir / idx["weight_map"][name].get<std::string>());
  }
  const std::string b = slurp(files[0]);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  const json h = json::parse(b.substr(8, n));
  if (!h.contains(name)) return {};
  const json& e = h[name];
  if (shape) *shape = e["shape"].get<std::vector<int64_t>>();
  const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
  const char* p = b.data() + 8 + n + begin;
  const std::string dt = e["dtype"];
  std::vector<float> out;
  const size_t esz = dt == "F32" ? 4 : 2;
  for (uint64_t i = 0; i < (end - begin) / esz; ++i) {
    if (dt == "F32") {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      out.push_back(f);
    } else {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out.push_back(dt == "BF16" ? bf16_to_float(v) : fp16_to_float(v));
    }
  }
  return out;
}

void expect_weights_match(const Model& m, const fs::path& dir) {
  const auto& w = m.weights;
  struct C {
    const Tensor* t;
    std::string name;
  };
  std::vector<C> checks = {{&w.tok_embd, "model.embed_tokens.weight"},
                           {&w.out_norm, "model.norm.weight"},
                           {&w.layers[1].wq, "model.layers.1.self_attn.q_proj.weight"},
                           {&w.layers[0].wk, "model.layers.0.self_attn.k_proj.weight"},
                           {&w.layers[1].wv, "model.layers.1.self_attn.v_proj.weight"},
                           {&w.layers[0].wo, "model.layers.0.self_attn.o_proj.weight"},
                           {&w.layers[1].attn_norm, "model.layers.1.input_layernorm.weight"},
                           {&w.layers[0].ffn_norm, "model.layers.0.post_attention_layernorm.weight"},
                           {&w.layers[1].w_gate, "model.layers.1.mlp.gate_proj.weight"},
                           {&w.layers[0].w_up, "model.layers.0.mlp.up_proj.weight"},
                           {&w.layers[1].w_down, "model.layers.1.mlp.down_proj.weight"}};
  if (!m.config.tied_embeddings) checks.push_back({&w.lm_head, "lm_head.weight"});
  for (const C& c : checks) {
    std::vector<int64_t> shape;
    const std::vector<float> want = read_direct(dir, c.name, &shape);
    ASSERT_FALSE(want.empty()) << c.name;
    EXPECT_EQ(c.t->shape, shape) << c.name;
    EXPECT_EQ(c.t->data, want) << c.name;
  }
}

// A copy of an hf_tiny model in a temp dir, for breaking.
struct Copy {
  TempDir tmp;
  fs::path dir;
  explicit Copy(const std::string& name) : tmp("hf"), dir(tmp.path / name) {
    fs::copy(kTiny / name, dir, fs::copy_options::recursive);
  }
  json config() const { return json::parse(slurp(dir / "config.json")); }
  void set_config(const json& j) const { write_text(dir / "config.json", j.dump(2)); }
};

// Rewrites a single-file checkpoint's tensors through `edit`.
void rewrite_tensors(const fs::path& dir, const std::function<void(std::vector<StTensor>&)>& edit) {
  const std::string b = slurp(dir / "model.safetensors");
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  const json h = json::parse(b.substr(8, n));
  std::vector<StTensor> ts;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    const uint8_t* p = reinterpret_cast<const uint8_t*>(b.data()) + 8 + n;
    ts.push_back(
        {name, e["dtype"], e["shape"].get<std::vector<int64_t>>(), std::vector<uint8_t>(p + begin, p + end)});
  }
  edit(ts);
  write_file(dir / "model.safetensors", st_bytes(ts));
}

const char* kV4Config = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "hidden_act": "silu",
  "rope_theta": 500000.0, "tie_word_embeddings": false, "head_dim": null,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "_name_or_path": "meta-llama/Llama-3.1-8B"})";

}  // namespace

TEST(HfCheckpoint, Bf16SingleFileTied) {
  const fs::path dir = kTiny / "gqa_hd64_tied_bf16";
  const Model m = load_model(dir);
  const ModelConfig& c = m.config;
  EXPECT_EQ(m.format, "hf-safetensors");
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate, 384);
  EXPECT_EQ(c.vocab, 320);
  EXPECT_EQ(c.max_context, 512);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(m.weights.lm_head.empty());
  EXPECT_TRUE(m.tokenizer.tokens.empty());
  EXPECT_EQ(m.sources.size(), 2u * 9 + 2);
  for (const auto& s : m.sources) EXPECT_EQ(s.type, "BF16") << s.name;
  expect_weights_match(m, dir);
}

TEST(HfCheckpoint, F16ShardedUntiedLlama3) {
  const fs::path dir = kTiny / "gqa_hd128_untied_llama3_f16_sharded";
  const Model m = load_model(dir);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate, 320);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 64);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(m.weights.lm_head.shape, (std::vector<int64_t>{320, 256}));
  EXPECT_EQ(m.sources.size(), 2u * 9 + 3);
  EXPECT_EQ(hf_weight_files(dir).size(), 10u);
  expect_weights_match(m, dir);
}

TEST(HfCheckpoint, F32HeadDimNotHiddenOverHeads) {
  const fs::path dir = kTiny / "mqa_hd64_wide_heads_f32";
  const Model m = load_model(dir);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.hidden, 96);
  EXPECT_EQ(c.n_heads, 3);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_dim(), 192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(m.weights.layers[0].wq.shape, (std::vector<int64_t>{192, 96}));
  EXPECT_EQ(m.weights.layers[0].wo.shape, (std::vector<int64_t>{96, 192}));
  expect_weights_match(m, dir);
  // Metadata only.
  const Model h = inspect_model(dir);
  EXPECT_TRUE(h.weights.layers.empty());
  EXPECT_EQ(h.sources.size(), m.sources.size());
  EXPECT_EQ(h.config.head_dim, 64);
}

TEST(HfCheckpoint, ConfigTransformersV4RopeScaling) {
  const ModelConfig c = parse_hf_config(kV4Config, "v4.json");
  EXPECT_EQ(c.name, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.vocab, 128256);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_NO_THROW(c.validate("v4.json"));
  // The older spelling "type" and a null rope_scaling.
  json j = json::parse(kV4Config);
  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(parse_hf_config(j.dump(), "x").rope_scaling.type, "llama3");
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse_hf_config(j.dump(), "x").rope_scaling.type, "none");
  // Defaults: kv heads = heads, theta 10000, eps 1e-6, context 2048, untied.
  for (const char* k : {"num_key_value_heads", "rope_theta", "rms_norm_eps", "max_position_embeddings",
                        "tie_word_embeddings"})
    j.erase(k);
  const ModelConfig d = parse_hf_config(j.dump(), "x");
  EXPECT_EQ(d.n_kv_heads, 32);
  EXPECT_EQ(d.rope_theta, 10000.0f);
  EXPECT_EQ(d.rms_eps, 1e-6f);
  EXPECT_EQ(d.max_context, 2048);
  EXPECT_FALSE(d.tied_embeddings);
  // rope_parameters (v5) wins over rope_scaling and rope_theta.
  j["rope_theta"] = 1.0;
  j["rope_scaling"] = json{{"rope_type", "linear"}, {"factor", 2.0}};
  j["rope_parameters"] = json{{"rope_type", "default"}, {"rope_theta", 250000.0}};
  const ModelConfig v5 = parse_hf_config(j.dump(), "x");
  EXPECT_EQ(v5.rope_theta, 250000.0f);
  EXPECT_EQ(v5.rope_scaling.type, "none");
}

TEST(HfCheckpoint, BrokenConfigs) {
  const json base = json::parse(kV4Config);
  auto err = [&](const std::function<void(json&)>& edit, const std::string& msg) {
    json j = base;
    edit(j);
    EXPECT_FUTR_ERROR(parse_hf_config(j.dump(), "cfg.json").validate("cfg.json"), msg);
  };
  EXPECT_FUTR_ERROR(parse_hf_config("{\"a\": ", "cfg.json"), "cfg.json: not valid JSON");
  EXPECT_FUTR_ERROR(parse_hf_config("[1]", "cfg.json"), "expected a JSON object");
  err([](json& j) { j["architectures"] = {"GemmaForCausalLM"}; },
      "cfg.json: unsupported architecture [\"GemmaForCausalLM\"] (supported: LlamaForCausalLM, "
      "MistralForCausalLM, "
      "Qwen2ForCausalLM");
  err(
      [](json& j) {
        j["architectures"] = {"MistralForCausalLM"};
        j["model_type"] = "mistral";
        j["sliding_window"] = 0;
      },
      "sliding_window 0 must be positive");
  {  // Mistral: Llama; a sliding window caps the context (attention within it is exact)
    json j = base;
    j["architectures"] = {"MistralForCausalLM"};
    j["model_type"] = "mistral";
    j["max_position_embeddings"] = 32768;
    j["sliding_window"] = 4096;  // 7B v0.1
    ModelConfig c = parse_hf_config(j.dump(), "cfg.json");
    EXPECT_EQ(c.arch, "llama");
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ(c.max_context, 4096);
    j["sliding_window"] = nullptr;  // v0.2, v0.3
    EXPECT_EQ(parse_hf_config(j.dump(), "cfg.json").max_context, 32768);
  }
  err([](json& j) { j["architectures"] = "LlamaForCausalLM"; }, "'architectures' must be an array");
  err(
      [](json& j) {
        j.erase("architectures");
        j["model_type"] = "gemma";
      },
      "unsupported model_type 'gemma'");
  err(
      [](json& j) {
        j["architectures"] = {"Qwen2ForCausalLM"};
        j["use_sliding_window"] = true;
      },
      "sliding-window attention (use_sliding_window = true) is not supported");
  {  // Qwen2: Llama with q/k/v biases
    json j = base;
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["model_type"] = "qwen2";
    j["use_sliding_window"] = false;
    const ModelConfig c = parse_hf_config(j.dump(), "cfg.json");
    EXPECT_EQ(c.arch, "qwen2");
    EXPECT_TRUE(c.qkv_bias);
    c.validate("cfg.json");
  }
  err(
      [](json& j) {
        j.erase("architectures");
        j.erase("model_type");
      },
      "neither 'architectures' nor 'model_type'");
  err([](json& j) { j["hidden_size"] = "4096"; }, "'hidden_size' must be an integer, found \"4096\"");
  err([](json& j) { j["hidden_size"] = 4096.5; }, "'hidden_size' must be an integer");
  err([](json& j) { j["hidden_size"] = -1; }, "'hidden_size' = -1 is out of range");
  err([](json& j) { j["hidden_size"] = 1ll << 40; }, "is out of range");
  err([](json& j) { j.erase("vocab_size"); }, "cfg.json: missing 'vocab_size'");
  err([](json& j) { j["num_key_value_heads"] = 3; }, "n_heads 32 is not a multiple of n_kv_heads 3");
  err([](json& j) { j["num_attention_heads"] = 0; }, "not a multiple of num_attention_heads 0");
  err(
      [](json& j) {
        j["num_attention_heads"] = 0;
        j["head_dim"] = 128;
      },
      "n_heads = 0 is out of range");
  err(
      [](json& j) {
        j["hidden_size"] = 4000;
        j["num_attention_heads"] = 33;
        j["num_key_value_heads"] = 33;
      },
      "not a multiple of num_attention_heads");
  err([](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act 'gelu' is not supported");
  err([](json& j) { j["attention_bias"] = true; }, "'attention_bias' = true is not supported");
  err([](json& j) { j["rms_norm_eps"] = 1e300; }, "'rms_norm_eps' = 1e+300 is out of range");
  // Denormal (or merely tiny) values load as floats > 0, but no model has them:
  // refused with the field named, not run with a changed text.
  err([](json& j) { j["rms_norm_eps"] = 1e-40; }, "rms_eps 1e-40 is out of range [1e-12, 1)");
  err([](json& j) { j["rope_theta"] = 1e-40; }, "rope_theta 1e-40 is out of range [1, 1e12]");
  err([](json& j) { j["rope_theta"] = 0.5; }, "rope_theta 0.5 is out of range [1, 1e12]");

  err([](json& j) { j["rope_scaling"]["rope_type"] = "yarn"; }, "unsupported rope_scaling type 'yarn'");
  err([](json& j) { j["rope_scaling"].erase("rope_type"); }, "no 'rope_type' (or 'type')");
  err([](json& j) { j["rope_scaling"].erase("low_freq_factor"); }, "llama3 scaling needs 'low_freq_factor'");
  err([](json& j) { j["rope_scaling"]["high_freq_factor"] = 0.5; }, "0 < low_freq_factor < high_freq_factor");
  err([](json& j) { j["rope_scaling"] = 3; }, "'rope_scaling' must be an object");
  err([](json& j) { j["tie_word_embeddings"] = 1; }, "'tie_word_embeddings' must be true or false");
}

TEST(HfCheckpoint, TiedRules) {
  {  // tie_word_embeddings false, lm_head.weight absent: tied.
    Copy c("mqa_hd64_wide_heads_f32");
    rewrite_tensors(c.dir,
                    [](auto& ts) { std::erase_if(ts, [](auto& t) { return t.name == "lm_head.weight"; }); });
    const Model m = load_model(c.dir);
    EXPECT_TRUE(m.config.tied_embeddings);
    EXPECT_TRUE(m.weights.lm_head.empty());
  }
  {  // tie_word_embeddings true with an lm_head.weight present: tied, the embedding wins.
    Copy c("mqa_hd64_wide_heads_f32");
    json j = c.config();
    j["tie_word_embeddings"] = true;
    c.set_config(j);
    const Model m = load_model(c.dir);
    EXPECT_TRUE(m.config.tied_embeddings);
    EXPECT_TRUE(m.weights.lm_head.empty());
  }
}

TEST(HfCheckpoint, BrokenTensorSets) {
  {
    Copy c("mqa_hd64_wide_heads_f32");
    rewrite_tensors(c.dir, [](auto& ts) {
      std::erase_if(ts, [](auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
    });
    EXPECT_FUTR_ERROR(load_model(c.dir), "missing tensor 'model.layers.1.mlp.up_proj.weight'");
  }
  {
    Copy c("mqa_hd64_wide_heads_f32");
    rewrite_tensors(c.dir, [](auto& ts) {
      ts.push_back(
          st_from_floats("model.layers.0.self_attn.q_proj.bias", "F32", {192}, std::vector<float>(192)));
      ts.push_back(st_from_floats("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {32},
                                  std::vector<float>(32)));
    });
    EXPECT_FUTR_ERROR(
        load_model(c.dir),
        "tensor 'model.layers.0.self_attn.q_proj.bias' is a projection bias, which the llama architecture");
  }
  {  // inv_freq buffers alone are ignored.
    Copy c("mqa_hd64_wide_heads_f32");
    rewrite_tensors(c.dir, [](auto& ts) {
      ts.push_back(st_from_floats("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {32},
                                  std::vector<float>(32)));
    });
    EXPECT_NO_THROW(load_model(c.dir));
  }
  {
    Copy c("mqa_hd64_wide_heads_f32");
    rewrite_tensors(c.dir, [](auto& ts) {
      for (auto& t : ts)
        if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {96, 64};
    });
    EXPECT_FUTR_ERROR(load_model(c.dir),
                      "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [96, 64], expected [64, 96] "
                      "from config.json");
  }
  {
    Copy c("mqa_hd64_wide_heads_f32");
    rewrite_tensors(c.dir, [](auto& ts) {
      for (auto& t : ts)
        if (t.name == "model.norm.weight") t = {t.name, "I32", t.shape, t.data};
    });
    EXPECT_FUTR_ERROR(load_model(c.dir),
                      "tensor 'model.norm.weight' has dtype I32; supported: BF16, F16, F32");
  }
  {
    Copy c("mqa_hd64_wide_heads_f32");
    fs::remove(c.dir / "model.safetensors");
    EXPECT_FUTR_ERROR(load_model(c.dir), "no model.safetensors or model.safetensors.index.json");
  }
  {
    Copy c("mqa_hd64_wide_heads_f32");
    write_text(c.dir / "config.json", "{\"hidden_size\": ");
    EXPECT_FUTR_ERROR(load_model(c.dir), "config.json: not valid JSON");
    write_text(c.dir / "config.json", "{\"x\": \"" + std::string(5 << 20, 'a') + "\"}");
    EXPECT_FUTR_ERROR(load_model(c.dir), "5242889 bytes, more than the 4 MiB limit");
  }
}

TEST(HfCheckpoint, BrokenShardIndex) {
  const std::string name = "gqa_hd128_untied_llama3_f16_sharded";
  auto with_index = [&](const std::function<void(json&)>& edit, const std::string& msg) {
    Copy c(name);
    json idx = json::parse(slurp(c.dir / "model.safetensors.index.json"));
    edit(idx);
    write_text(c.dir / "model.safetensors.index.json", idx.dump());
    EXPECT_FUTR_ERROR(load_model(c.dir), msg);
  };
  with_index([](json& j) { j["weight_map"]["model.norm.weight"] = "../../etc/passwd"; },
             "is not a plain file name in the directory");
  with_index([](json& j) { j["weight_map"]["model.norm.weight"] = "model-99.safetensors"; },
             "shard 'model-99.safetensors' (named by the index) is missing");
  with_index([](json& j) { j["weight_map"]["model.norm.weight"] = "model-00001-of-00010.safetensors"; },
             "puts 'model.norm.weight' in model-00001-of-00010.safetensors, but that file does not hold it");
  with_index([](json& j) { j["weight_map"] = json::array(); }, "no 'weight_map' object");
  with_index([](json& j) { j["weight_map"]["x"] = 3; }, "weight_map['x'] must be a file name");
  with_index([](json& j) { j["weight_map"] = json::object(); }, "the weight_map is empty");
  {  // A tensor in two shards.
    Copy c(name);
    const fs::path s1 = c.dir / "model-00001-of-00010.safetensors";
    write_file(s1, st_bytes({st_from_floats("model.norm.weight", "F16", {256}, std::vector<float>(256))}));
    EXPECT_FUTR_ERROR(load_model(c.dir), "tensor 'model.norm.weight' is in both");
  }
}

TEST(HfCheckpoint, TokenizerJson) {
  Copy c("gqa_hd64_tied_bf16");
  // A minimal byte-level BPE tokenizer.json: 256 byte tokens and one merge.
  auto byte_char = [](int b) {
    int n = 0, cp = -1;
    for (int x = 0; x < 256; ++x) {
      const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
      if (x == b) cp = printable ? x : 256 + n;
      if (!printable) ++n;
    }
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 0x3f));
    return s;
  };
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["ab"] = 256;
  const json tok = {
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", {"a b"}}}}};
  write_text(c.dir / "tokenizer.json", tok.dump());
  const Model m = inspect_model(c.dir);
  EXPECT_EQ(m.tokenizer.tokens.size(), 257u);
  EXPECT_EQ(m.tokenizer.tokens[256], "ab");
  EXPECT_EQ(load_tokenizer_spec(c.dir).merges, (std::vector<std::string>{"a b"}));
  // Without tokenizer.json: an empty spec.
  EXPECT_TRUE(load_tokenizer_spec(kTiny / "gqa_hd64_tied_bf16").tokens.empty());
}
