// End to end on both engines, per model family beyond Llama 3: the tiny
// random Qwen2 (q/k/v biases), Mistral and Llama-2 (SentencePiece-style
// tokenizer) checkpoints of tests/data/hf_tiny made usable by
// tests/support/tiny_families.h (a tokenizer and the family's chat template):
// `futr generate` (greedy twice: one text; --json statistics), `futr chat` (a
// turn through the family's template), `futr perplexity` (finite), `futr
// quantize` to a .futr file and `futr generate` from it. A random model writes
// random bytes: these check that every command runs the family through, not
// what it says. The CPU engine always; the GPU engine (--backend gpu) on a
// Hopper GPU, skipped with the reason `futr --version` gives without one.
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

// Why the GPU engine cannot run here ("" where it can): `futr --version`'s GPU line.
const std::string& gpu_unavailable() {
  static const std::string why = [] {
    const Result v = run({"--version"});
    const size_t at = v.out.find("\nGPU: ");
    const std::string line =
        at == std::string::npos ? "GPU: unknown" : v.out.substr(at + 1, v.out.find('\n', at + 1) - at - 1);
    return line.starts_with("GPU: NVIDIA") ? std::string() : line;
  }();
  return why;
}

void runs_every_command(const futr::test::TinyFamily& f, const std::string& backend) {
  if (backend == "gpu" && !gpu_unavailable().empty())
    GTEST_SKIP() << "GPU engine skipped: " << gpu_unavailable();
  const std::string m = futr::test::tiny_family_dir(f, work_dir()).string();
  SCOPED_TRACE(std::string(f.dir) + " on the " + backend + " engine");
  // Greedy generation: the same text twice, with its statistics.
  const std::vector<std::string> gen = {"generate",     "-m", m,           "The capital of",
                                        "--max-tokens", "12", "--temp",    "0",
                                        "-t",           "2",  "--backend", backend};
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
  const Result c = run({"chat", "-m", m, "--max-tokens", "8", "--temp", "0", "-t", "2", "--backend", backend},
                       "Hello there\n");
  EXPECT_EQ(c.rc, 0) << c.err;
  // Perplexity: finite, above 1.
  const Result p = run({"perplexity", text_file().string(), "-m", m, "--ctx", "64", "--max-tokens", "256",
                        "--json", "-q", "-t", "2", "--backend", backend});
  ASSERT_EQ(p.rc, 0) << p.err;
  const double ppl = nlohmann::json::parse(p.out).at("ppl").get<double>();
  EXPECT_TRUE(std::isfinite(ppl) && ppl > 1.0) << p.out;
  // Quantized to INT4 in a .futr file, which then generates greedily.
  const fs::path out = work_dir() / (std::string(f.dir) + ".futr");
  const Result q =
      run({"quantize", "-m", m, "-o", out.string(), "--weights", "int4", "--quant", "rtn", "-t", "2"});
  ASSERT_EQ(q.rc, 0) << q.err;
  const Result g4 = run({"generate", "-m", out.string(), "The capital of", "--max-tokens", "8", "--temp", "0",
                         "-t", "2", "--backend", backend});
  EXPECT_EQ(g4.rc, 0) << g4.err;
}

class FamiliesCli : public ::testing::TestWithParam<std::string> {};

TEST_P(FamiliesCli, Qwen2RunsEveryCommand) { runs_every_command(futr::test::kTinyQwen2, GetParam()); }

TEST_P(FamiliesCli, MistralRunsEveryCommand) { runs_every_command(futr::test::kTinyMistral, GetParam()); }

TEST_P(FamiliesCli, Llama2SentencePieceRunsEveryCommand) {
  runs_every_command(futr::test::kTinyLlama2, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Engine, FamiliesCli, ::testing::Values("cpu", "gpu"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
