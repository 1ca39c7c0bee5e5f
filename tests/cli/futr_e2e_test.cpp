// End to end: the `futr` binary on the default model (SmolLM2-135M-Instruct
// Q4_1, fetched by scripts/fetch-model.sh; the tests that need it skip with
// that reason when it is absent), and its error handling (exit status 1 with
// a message, never a crash).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/run_futr.h"

namespace {

namespace fs = std::filesystem;

using Result = futr::test::FutrRun;
using futr::test::slurp;

// Runs futr with `args` (and `input` on stdin), capturing both streams.
Result futr(const std::vector<std::string>& args, const std::string& input = "") {
  return futr::test::run_futr(args, input);
}

bool have_model() { return fs::exists(FUTR_DEFAULT_MODEL); }
#define REQUIRE_MODEL() \
  if (!have_model())    \
  GTEST_SKIP() << "default model " << FUTR_DEFAULT_MODEL << " is absent: run scripts/fetch-model.sh"

TEST(FutrE2E, GenerateGreedyKnowsParis) {
  REQUIRE_MODEL();
  const Result r = futr({"generate", "The capital of France is", "--temperature", "0", "--max-tokens", "16"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
  std::printf("generate: %s\n%s", r.out.c_str(), r.err.c_str());
}

TEST(FutrE2E, GeneratePromptFromStdinAndChat) {
  REQUIRE_MODEL();
  const Result a = futr({"generate", "--temperature", "0", "--max-tokens", "8"}, "The capital of France is");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.out.find("Paris"), std::string::npos) << a.out;
  const Result c = futr(
      {"generate", "--chat", "What is the capital of France?", "--temperature", "0", "--max-tokens", "24"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.out.find("Paris"), std::string::npos) << c.out;
  std::printf("chat: %s", c.out.c_str());
}

TEST(FutrE2E, GenerationStopsWhenTheContextIsFull) {
  REQUIRE_MODEL();
  const Result r = futr(
      {"generate", "The capital of France is", "--temperature", "0", "--ctx", "9", "--max-tokens", "50"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("context of 9 tokens is full"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generation     5 tokens"), std::string::npos) << r.err;  // 5 prompt + 4 steps
}

TEST(FutrE2E, SampledGenerationIsSeedReproducible) {
  REQUIRE_MODEL();
  const std::vector<std::string> args = {"generate",      "Once upon a time",
                                         "--temperature", "0.9",
                                         "--top-k",       "50",
                                         "--top-p",       "0.9",
                                         "--seed",        "5",
                                         "--max-tokens",  "12",
                                         "--quiet"};
  const Result a = futr(args), b = futr(args);
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_GT(a.out.size(), 10u);
}

TEST(FutrE2E, PerplexityOnShortText) {
  REQUIRE_MODEL();
  // The committed 12 KiB excerpt of wiki.test.raw: quick enough for an end-to-end test.
  ASSERT_TRUE(fs::exists(FUTR_TEST_TEXT)) << FUTR_TEST_TEXT;
  const Result r = futr({"perplexity", FUTR_TEST_TEXT, "--ctx", "512", "--max-tokens", "1200", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double ppl = j.at("ppl");
  std::printf("perplexity (first 1200 tokens, ctx 512): %.4f +- %.4f\n", ppl, j.at("stderr").get<double>());
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_GT(ppl, 3.0);
  EXPECT_LT(ppl, 200.0);
  EXPECT_EQ(j.at("tokens").get<int>(), 1200 - 3);  // 3 windows, each scores all but its first token
  EXPECT_EQ(j.at("ctx").get<int>(), 512);
  EXPECT_EQ(j.at("stride").get<int>(), 512);
  EXPECT_GT(j.at("stderr").get<double>(), 0.0);
  EXPECT_NE(r.err.find("tokens"), std::string::npos);  // progress bar / summary

  const Result t = futr(
      {"perplexity", FUTR_TEST_TEXT, "--ctx", "256", "--stride", "128", "--max-tokens", "400", "--quiet"});
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(perplexity = [0-9.]+ \+- [0-9.]+)"))) << t.out;
}

void expect_error(const Result& r, const std::string& what) {
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << "stderr: " << r.err;
}

TEST(FutrE2E, ErrorsExitOneWithAMessage) {
  expect_error(futr({}), "subcommand");
  expect_error(futr({"generate", "--bogus-flag"}), "bogus");
  expect_error(futr({"perplexity", "--ctx", "abc"}), "ctx");
  expect_error(futr({"generate", "hi", "--model", "/nonexistent/model.gguf"}), "does not exist");
  expect_error(futr({"generate", "hi", "--temperature", "-1"}), "temperature");
  expect_error(futr({"generate", "hi", "--backend", "tpu"}), "backend");
  const fs::path junk = fs::temp_directory_path() / "futr_e2e_junk.gguf";
  { std::ofstream(junk) << "not a model"; }
  const Result j = futr({"generate", "hi", "--model", junk.string()});
  EXPECT_EQ(j.rc, 1) << j.err;
  EXPECT_NE(j.err.find("error"), std::string::npos) << j.err;
  fs::remove(junk);
  EXPECT_EQ(futr({"--help"}).rc, 0);
}

TEST(FutrE2E, ErrorsThatNeedTheModel) {
  REQUIRE_MODEL();
  expect_error(futr({"perplexity", "/nonexistent/text.txt"}), "no such file");
  expect_error(futr({"generate", "one two three four five six seven eight nine ten", "--ctx", "4"}),
               "context");
  expect_error(futr({"perplexity", FUTR_TEST_TEXT, "--ctx", "64", "--stride", "65"}), "stride");
}

// --stop ends the answer before the stop string (not shown); the range checks
// of the sampling flags run before the model loads.
TEST(FutrE2E, StopStringsAndSamplingRanges) {
  REQUIRE_MODEL();
  const Result r =
      futr({"generate", "The capital of France is", "--temperature", "0", "-n", "16", "--stop", "Par"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("Par"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("generation     1 tokens"), std::string::npos) << r.err;  // " Paris" was the first
  for (const auto& [flag, value, msg] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--min-p", "1.5", "--min-p must be in [0, 1] (got 1.5)"},
           {"--presence-penalty", "3", "--presence-penalty must be in [-2, 2]"},
           {"--frequency-penalty", "-2.5", "--frequency-penalty must be in [-2, 2]"},
           {"--repetition-penalty", "0", "--repetition-penalty must be in (0, 10]"},
           {"--penalty-last-n", "-1", "--penalty-last-n must be in [0, 1048576]"},
           {"--stop", "", "--stop: each stop string must have 1 to 256 bytes"}}) {
    const Result e = futr({"generate", "x", flag, value});
    EXPECT_EQ(e.rc, 1) << flag;
    EXPECT_NE(e.err.find(msg), std::string::npos) << flag << ": " << e.err;
  }
}

// `futr --version`: version, commit, build type, the CUDA line and the GPU line.
TEST(FutrE2E, VersionSaysWhatWasBuiltAndTheGpu) {
  const Result r = futr({"--version"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(^futr \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}(-dirty)?|unknown), \w+ build\)\n)")))
      << r.out;
#if FUTR_TEST_HAVE_CUDA
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\nCUDA: nvcc \d+\.\d+\.\d+, kernels for sm_90a, runtime \d+\.\d+)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nGPU: (NVIDIA .* \(sm_\d+, \d+ SMs|none usable: .+))")))
      << r.out;
#else
  EXPECT_NE(r.out.find("CUDA: not in this build"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU: not probed"), std::string::npos) << r.out;
#endif
  std::printf("%s", r.out.c_str());
}

// `cmake --install` puts futr, the docs and the default text under a prefix;
// the installed futr runs.
TEST(FutrE2E, InstallsFutrDocsAndText) {
  const fs::path prefix = fs::temp_directory_path() / fmt::format("futr_install_{}", ::getpid());
  fs::remove_all(prefix);
  const std::string cmd = ::futr::test::shell_quote(FUTR_CMAKE_COMMAND) + " --install " +
                          ::futr::test::shell_quote(FUTR_BUILD_DIR) + " --prefix " +
                          ::futr::test::shell_quote(prefix.string()) + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const char* f :
       {"bin/futr", "share/doc/futransformer/README.md", "share/doc/futransformer/ARCHITECTURE.md",
        "share/futransformer/README.md", "share/futransformer/wikitext-2-raw/wiki.test.raw"})
    EXPECT_TRUE(fs::exists(prefix / f)) << f;
  EXPECT_EQ(fs::file_size(prefix / "share/futransformer/wikitext-2-raw/wiki.test.raw"),
            fs::file_size(FUTR_DEFAULT_TEXT));
  const std::string out = (prefix / "version.txt").string();
  EXPECT_EQ(std::system((::futr::test::shell_quote((prefix / "bin/futr").string()) + " --version > " +
                         ::futr::test::shell_quote(out))
                            .c_str()),
            0);
  EXPECT_EQ(slurp(out).rfind("futr ", 0), 0u) << slurp(out);
  fs::remove_all(prefix);
}

}  // namespace
