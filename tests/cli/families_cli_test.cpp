// End to end on the CPU engine, per model family beyond Llama: the tiny
// random Qwen2 (q/k/v biases) and Mistral checkpoints of tests/data/hf_tiny
// made usable by tests/support/tiny_families.h (a byte-level tokenizer and
// the family's chat template): `futr generate` (greedy twice: one
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
#include "support/scratch_dir.h"
#include "support/tiny_families.h"

namespace {

namespace fs = std::filesystem;
using Result = futr::test::FutrRun;

const fs::path& work_dir() { return futr::test::scratch_dir("families_cli"); }

fs::path text_file() {
  const fs::path p = work_dir() / "text.txt";
  if (!fs::exists(p)) std::ofstream(p) << futr::test::slurp(FUTR_TEST_TEXT).substr(0, 1500);
  return p;
}

Result run(const std::vector<std::string>& args, const std::string& input = "") {
  return futr::test::run_futr(args, input);
}

void runs_every_command(const futr::test::TinyFamily& f) {
  const std::string m = futr::test::tiny_family_dir(f, work_dir()).string();
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

TEST(FamiliesCli, Qwen2RunsEveryCommand) { runs_every_command(futr::test::kTinyQwen2); }

TEST(FamiliesCli, MistralRunsEveryCommand) { runs_every_command(futr::test::kTinyMistral); }

TEST(FamiliesCli, Llama2SentencePieceRunsEveryCommand) { runs_every_command(futr::test::kTinyLlama2); }

}  // namespace
