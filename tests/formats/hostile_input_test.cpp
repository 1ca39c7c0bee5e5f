// Hostile inputs across every reader: a table of broken or
// adversarial model files and directories, each loaded as `futr generate`
// (load_model) and inspected as `futr info` (inspect_model) would. Every one
// must end in a futr::Error whose message names the file and the problem; no
// crash, hang, absurd allocation or raw control byte in the message.
// The .futr-specific cases are in tests/quant/futr_file_test.cpp
// (StrictHeaderTable), JSON limits in tests/core/json_test.cpp, tokenizer.json
// in tests/tokenizer/hf_json_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "formats/gguf_writer.h"
#include "formats/loader.h"
#include "formats/safetensors_writer.h"
#include "tokenizer/test_util.h"

using namespace futr;
using namespace futr::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kHf = fs::path(FUTR_TEST_DATA) / "hf_tiny" / "gqa_hd64_tied_bf16";

// A GGUF tiny llama with a valid byte-level tokenizer (vocab 100); `edit` may
// change the model or the writer before the file is written.
fs::path gguf(const fs::path& dir, const std::function<void(TinyLlama&)>& edit_model,
              const std::function<void(GgufWriter&)>& edit_writer = {}) {
  TinyLlama m;
  m.vocab = 100;
  m.make();
  if (edit_model) edit_model(m);
  GgufWriter g = m.writer(T_F32);
  std::vector<std::string> toks = {byte_char(' ')};
  for (int b = 0x21; b < 0x7f; ++b) toks.push_back(byte_char(uint8_t(b)));
  toks.insert(toks.end(), {"<s>", "</s>", "ab", "cd", "ef"});
  g.add_string("tokenizer.ggml.model", "gpt2");
  g.add_string_array("tokenizer.ggml.tokens", toks);
  g.add_string_array("tokenizer.ggml.merges", {"a b", "c d", "e f"});
  if (edit_writer) edit_writer(g);
  const fs::path p = dir / "m.gguf";
  g.write(p);
  return p;
}

// A copy of an hf_tiny checkpoint; `edit` breaks it.
fs::path hf(const fs::path& dir, const std::function<void(const fs::path&)>& edit) {
  const fs::path d = dir / "hf";
  fs::copy(kHf, d, fs::copy_options::recursive);
  edit(d);
  return d;
}

// A byte-level tokenizer.json (256 byte tokens, no merges) plus `extra` vocab entries.
json tokenizer_json(const json& extra = json::object()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(uint8_t(b))] = b;
  for (const auto& [k, v] : extra.items()) vocab[k] = v;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
}

std::string deep_json(int depth) {
  return "{\"a\": " + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + "}";
}

struct Case {
  const char* klass;  // the kind of damage (docs/RELIABILITY.md)
  const char* what;
  std::function<fs::path(const fs::path& dir)> make;
  const char* error;  // substring of the message
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      // 1: deep nesting.
      {"1", "config.json nested 100000 deep",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) { write_text(h / "config.json", deep_json(100000)); });
       },
       "config.json: JSON nested deeper than 64 levels"},
      {"1", "generation_config.json nested 100000 deep",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           write_text(h / "tokenizer.json", tokenizer_json().dump());
           write_text(h / "generation_config.json", deep_json(100000));
         });
       },
       "generation_config.json: JSON nested deeper than 64 levels"},
      // 2: numbers that do not fit.
      {"2", "config.json rope_theta 1e300",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           json j = json::parse(std::ifstream(h / "config.json"));
           j["rope_theta"] = 1e300;
           write_text(h / "config.json", j.dump());
         });
       },
       "'rope_theta' = 1e+300 is out of range"},
      {"2", "config.json hidden_size 2^32 + 64",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           json j = json::parse(std::ifstream(h / "config.json"));
           j["hidden_size"] = (uint64_t(1) << 32) + 64;
           write_text(h / "config.json", j.dump());
         });
       },
       "'hidden_size' = 4294967360 is out of range"},
      // 3: a huge token id.
      {"3", "tokenizer.json with token id 16,000,000",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           write_text(h / "tokenizer.json", tokenizer_json({{"huge", 16000000}}).dump());
         });
       },
       "id 16000000 is out of range [0, 320) (the model's vocab_size)"},
      // 4: silent garbage.
      {"4", "GGUF weight NaN",
       [](const fs::path& d) {
         return gguf(d, [](TinyLlama& m) {
           for (auto& w : m.weights)
             if (w.name == "blk.1.ffn_up.weight") w.v[7] = NAN;
         });
       },
       "tensor 'blk.1.ffn_up.weight' has a non-finite value at element 7"},
      {"4", "safetensors weight Inf",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           const std::string b = [&] {
             std::ifstream f(h / "model.safetensors", std::ios::binary);
             return std::string(std::istreambuf_iterator<char>(f), {});
           }();
           uint64_t n;
           std::memcpy(&n, b.data(), 8);
           const json hd = json::parse(b.substr(8, n));
           std::string out = b;
           const uint64_t at = 8 + n + hd["model.norm.weight"]["data_offsets"][0].get<uint64_t>();
           out[at] = char(0x80), out[at + 1] = char(0x7f);  // BF16 +inf
           std::ofstream(h / "model.safetensors", std::ios::binary) << out;
         });
       },
       "tensor 'model.norm.weight' has a non-finite value at element 0"},
      {"4", "GGUF vocabulary without byte tokens",
       [](const fs::path& d) {
         return gguf(d, {}, [](GgufWriter& g) {
           g.remove("tokenizer.ggml.tokens");
           g.remove("tokenizer.ggml.merges");
           g.add_string_array("tokenizer.ggml.tokens", {"hello", "world"});
         });
       },
       "tokenizer: the vocabulary has no byte token for 95 of the 95 printable ASCII bytes"},
      // 6: escape sequences from the file never reach the message raw.
      {"6", "GGUF tensor name with a terminal escape",
       [](const fs::path& d) {
         return gguf(d, {}, [](GgufWriter& g) { g.add_f32_tensor("\x1b]0;owned\x07", {2}, {1, 2}); });
       },
       "unexpected tensor '\\x1b]0;owned\\x07'"},
      {"6", "GGUF architecture with a CSI sequence",
       [](const fs::path& d) {
         return gguf(d, {}, [](GgufWriter& g) {
           g.remove("general.architecture");
           g.add_string("general.architecture", "llama\x1b[2J\xc2\x9b");
         });
       },
       "llama\\x1b[2J\\xc2\\x9b"},
      // 7: unclear errors.
      {"7", "model path is a FIFO",
       [](const fs::path& d) {
         ::mkfifo((d / "fifo").c_str(), 0600);
         return d / "fifo";
       },
       "fifo: is a FIFO, expected a model file or directory"},
      {"7", "model path is a character device", [](const fs::path&) { return fs::path("/dev/null"); },
       "/dev/null: is a character device"},
      {"7", "config.json is a directory",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           fs::remove(h / "config.json");
           fs::create_directories(h / "config.json");
         });
       },
       "config.json: is a directory, expected a regular file"},
      {"7", "tokenizer.json is a FIFO",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) { ::mkfifo((h / "tokenizer.json").c_str(), 0600); });
       },
       "tokenizer.json: is a FIFO, expected a regular file"},
      {"7", "model.safetensors is a directory",
       [](const fs::path& d) {
         return hf(d, [](const fs::path& h) {
           fs::remove(h / "model.safetensors");
           fs::create_directories(h / "model.safetensors");
         });
       },
       "model.safetensors: is a directory, expected a regular file"},
      {"7", "tokenizer error before (and instead of) a weight error",
       [](const fs::path& d) {
         return gguf(
             d,
             [](TinyLlama& m) {
               for (auto& w : m.weights)
                 if (w.name == "blk.0.attn_q.weight") w.v[0] = NAN;
             },
             [](GgufWriter& g) { g.add_string("tokenizer.ggml.pre", "chatglm-bpe"); });
       },
       "m.gguf: tokenizer: pre-tokenizer 'chatglm-bpe' is not supported"},
  };
  return c;
}

}  // namespace

TEST(HostileInput, EveryCaseIsAClearError) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string("class ") + c.klass + ": " + c.what);
    for (bool with_weights : {true, false}) {
      if (!with_weights && std::string(c.what).find("weight") != std::string::npos &&
          std::string(c.what).find("before") == std::string::npos)
        continue;  // weight values are only read by load_model
      TempDir t("hostile");
      const fs::path p = c.make(t.path);
      try {
        if (with_weights) load_model(p);
        else inspect_model(p);
        ADD_FAILURE() << "no error (" << (with_weights ? "load_model" : "inspect_model")
                      << "), expected: " << c.error;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(c.error), std::string::npos) << msg;
        // The message names the input: starts with its path (or the file in it).
        EXPECT_EQ(msg.rfind(p.string(), 0), 0u) << msg;
        for (char ch : msg)
          EXPECT_FALSE((unsigned char)ch < 0x20 || ch == 0x7f) << "raw control byte in: " << msg;
      }
    }
  }
}
