// Writes the seed corpus of the fuzz targets (fuzz/corpus/*), using the test
// writers of tests/formats/. Run once after a format change:
//   build-fuzz/bin/futr_fuzz_make_seeds fuzz/corpus
// The hf_config seeds are the config.json files of tests/data/hf_tiny/* plus
// a transformers-v4 style config written here.
#include <cmath>
#include <filesystem>
#include <iostream>

#include "formats/gguf_writer.h"
#include "formats/safetensors_writer.h"

using namespace futr::test;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " CORPUS_DIR\n";
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* d : {"gguf", "safetensors", "hf_config"}) fs::create_directories(out / d);

  // GGUF: a micro llama (one layer, hidden 32) in each matrix type, with a tokenizer.
  for (uint32_t type : {uint32_t(T_F32), uint32_t(T_F16), uint32_t(T_BF16), uint32_t(T_Q8_0),
                        uint32_t(T_Q4_0), uint32_t(T_Q4_1)}) {
    TinyLlama m;
    m.hidden = 32, m.layers = 1, m.heads = 2, m.kv_heads = 1, m.head_dim = 16, m.inter = 32;
    m.vocab = 8, m.ctx = 64;
    m.tied = type != T_F32;
    m.make(type);
    GgufWriter g = m.writer(type);
    if (type == T_Q4_1) {
      g.version = 2;
      g.set_alignment(64);
      g.add_string("tokenizer.ggml.model", "gpt2");
      g.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "<s>", "</s>", "x", "y"});
      g.add_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 3, 3, 1, 1});
      g.add_string_array("tokenizer.ggml.merges", {"a b"});
      g.add_u32("tokenizer.ggml.bos_token_id", 4);
      g.add_u32("tokenizer.ggml.eos_token_id", 5);
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
  std::cout << "seeds written to " << out << "\n";
  return 0;
}
