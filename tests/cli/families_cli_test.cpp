// End to end on the CPU engine, per model family beyond Llama: the tiny
// random Qwen2 (q/k/v biases) and Mistral checkpoints of tests/data/hf_tiny
// (built by Hugging Face transformers; their logits are checked against
// transformers' in cpu_hf_crosscheck_test) with a byte-level tokenizer.json
// and their family's chat template added: `futr generate` (greedy twice: one
// text; --json statistics), `futr chat` (a turn through the family's
// template), `futr perplexity` (finite), `futr quantize` to a .futr file and
// `futr generate` from it. A random model writes random bytes: these check
// that every command runs the family through, not what it says.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/run_futr.h"
#include "tokenizer/test_util.h"

namespace {

namespace fs = std::filesystem;
using Result = futr::test::FutrRun;

fs::path work_dir() {
  static const fs::path d = fs::temp_directory_path() / fmt::format("futr_families_cli_{}", ::getpid());
  fs::create_directories(d);
  return d;
}

class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(work_dir(), ec);
  }
};
const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUp);

struct Family {
  const char* dir;  // in tests/data/hf_tiny
  const char* bos;  // special tokens added after the 256 byte tokens ("" : none)
  const char* eos;
  const char* extra;      // one more special token of the template ("" : none)
  const char* template_;  // the family's chat template (the shape the chat renderer recognises)
};

// ChatML (Qwen2) and Mistral's [INST] template, abridged to what identifies them.
constexpr Family kQwen2{"qwen2_gqa_hd64_bias_tied_bf16", "", "<|im_end|>", "<|im_start|>",
                        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
                        "%}{{ '<|im_start|>assistant\\n' }}{% endif %}"};
constexpr Family kMistral{"mistral_gqa_hd64_untied_f16", "<s>", "</s>", "",
                          "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
                          "'[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + "
                          "eos_token }}{% endif %}{% endfor %}"};

// The checkpoint copied with tokenizer.json (256 byte tokens, no merges, the
// family's special tokens after them), tokenizer_config.json (bos / eos and
// the chat template) and a generation_config.json naming that eos.
fs::path model_dir(const Family& f) {
  const fs::path d = work_dir() / f.dir;
  if (fs::exists(d)) return d;
  fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / f.dir, d, fs::copy_options::recursive);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[futr::test::byte_char(uint8_t(b))] = b;
  nlohmann::json added = nlohmann::json::array();
  int id = 256, eos_id = -1;
  for (const char* s : {f.bos, f.eos, f.extra}) {
    if (*s == '\0') continue;
    if (std::string(s) == f.eos) eos_id = id;
    added.push_back({{"id", id++},
                     {"content", s},
                     {"special", true},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false}});
  }
  const nlohmann::json tok = {
      {"added_tokens", added},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  std::ofstream(d / "tokenizer.json") << tok.dump();
  nlohmann::json cfg = {{"eos_token", f.eos}, {"chat_template", f.template_}};
  if (*f.bos) cfg["bos_token"] = f.bos;
  std::ofstream(d / "tokenizer_config.json") << cfg.dump();
  std::ofstream(d / "generation_config.json") << nlohmann::json{{"eos_token_id", eos_id}}.dump();
  return d;
}

fs::path text_file() {
  const fs::path p = work_dir() / "text.txt";
  if (!fs::exists(p)) std::ofstream(p) << futr::test::slurp(FUTR_TEST_TEXT).substr(0, 1500);
  return p;
}

Result run(const std::vector<std::string>& args, const std::string& input = "") {
  return futr::test::run_futr(args, input);
}

void runs_every_command(const Family& f) {
  const std::string m = model_dir(f).string();
  SCOPED_TRACE(f.dir);
  // Greedy generation: the same text twice, with its statistics.
  const std::vector<std::string> gen = {"generate",     "-m", m,           "The capital of",
                                        "--max-tokens", "12", "--temp",    "0",
                                        "-t",           "2",  "--backend", "cpu"};
  const Result a = run(gen), b = run(gen);
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, b.out) << "greedy generation gave two texts";
  std::vector<std::string> js = gen;
  js.push_back("--json");
  js.push_back("--ignore-eos");
  const Result j = run(js);
  ASSERT_EQ(j.rc, 0) << j.err;
  // The statistics: the last line of stderr.
  const std::string e = j.err.substr(0, j.err.find_last_not_of('\n') + 1);
  const nlohmann::json st = nlohmann::json::parse(e.substr(e.rfind('\n') + 1));
  EXPECT_EQ(st.at("generated").get<int>(), 12) << j.err;
  // A chat turn through the family's template.
  const Result c = run({"chat", "-m", m, "--max-tokens", "8", "--temp", "0", "-t", "2", "--backend", "cpu"},
                       "Hello there\n");
  EXPECT_EQ(c.rc, 0) << c.err;
  // Perplexity: finite, above 1.
  const Result p = run({"perplexity", text_file().string(), "-m", m, "--ctx", "64", "--max-tokens", "256",
                        "--json", "-q", "-t", "2", "--backend", "cpu"});
  ASSERT_EQ(p.rc, 0) << p.err;
  const double ppl = nlohmann::json::parse(p.out).at("ppl").get<double>();
  EXPECT_TRUE(std::isfinite(ppl) && ppl > 1.0) << p.out;
  // Quantized to INT4 in a .futr file, which then generates greedily.
  const fs::path out = work_dir() / (std::string(f.dir) + ".futr");
  const Result q =
      run({"quantize", "-m", m, "-o", out.string(), "--weights", "int4", "--quant", "rtn", "-t", "2"});
  ASSERT_EQ(q.rc, 0) << q.err;
  const Result g4 = run({"generate", "-m", out.string(), "The capital of", "--max-tokens", "8", "--temp", "0",
                         "-t", "2", "--backend", "cpu"});
  EXPECT_EQ(g4.rc, 0) << g4.err;
}

TEST(FamiliesCli, Qwen2RunsEveryCommand) { runs_every_command(kQwen2); }

TEST(FamiliesCli, MistralRunsEveryCommand) { runs_every_command(kMistral); }

}  // namespace
