// The habits a llama.cpp user brings, end to end through the `futr` binary:
// llama.cpp's option spellings (-p/--prompt, --temp, -c/--ctx-size,
// -f/--file, -n/--n-predict, --ignore-eos; -ngl ignored with a note), an
// unknown command or option named with the nearest known one, a short
// `--help` with the advanced options under `--help-all`, defaults in `serve
// --help`, and the one default context printed. The parse errors need no
// model; the runs use the default model (skipped with the reason when it is
// absent), greedy on one thread.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/run_futr.h"

namespace {

namespace fs = std::filesystem;
using futr::test::run_futr;

#define REQUIRE_MODEL()                \
  if (!fs::exists(FUTR_DEFAULT_MODEL)) \
  GTEST_SKIP() << "default model " << FUTR_DEFAULT_MODEL << " is absent: run scripts/fetch-model.sh"

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(FamiliarCli, AnUnknownCommandIsNamedWithTheCommands) {
  const futr::test::FutrRun r = run_futr({"generte", "hi"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "unknown command 'generte' (did you mean 'generate'?)")) << r.err;
  EXPECT_TRUE(has(r.err, "generate, chat, perplexity, bench, quantize")) << r.err;
  const futr::test::FutrRun far = run_futr({"zzzzzzzz"});
  EXPECT_EQ(far.rc, 1);
  EXPECT_TRUE(has(far.err, "unknown command 'zzzzzzzz'; the commands:")) << far.err;
}

TEST(FamiliarCli, AnUnknownOptionNamesTheNearestOne) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"generate", "hi", "--temperatur", "0"}, "unknown option --temperatur (did you mean --temperature?)"},
      {{"generate", "hi", "--top_k", "5"}, "unknown option --top_k (did you mean --top-k?)"},
      {{"perplexity", "--ctx-sise=64"}, "unknown option --ctx-sise (did you mean --ctx-size?)"},
      {{"serve", "--prot", "1"}, "unknown option --prot (did you mean --port?)"},
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(args[1]);
    const futr::test::FutrRun r = run_futr(args);
    EXPECT_EQ(r.rc, 1);
    EXPECT_TRUE(has(r.err, want)) << r.err;
  }
}

TEST(FamiliarCli, HelpIsShortAndHelpAllHasEveryOption) {
  const futr::test::FutrRun help = run_futr({"generate", "--help"});
  ASSERT_EQ(help.rc, 0) << help.err;
  for (const char* common : {"--prompt", "--temp", "--ctx-size", "--file", "--n-predict", "--ignore-eos",
                             "--model", "--threads", "--weights", "--help-all"})
    EXPECT_TRUE(has(help.out, common)) << common << "\n" << help.out;
  for (const char* advanced :
       {"--fp8-history", "--fp8-margin", "--calib-tokens", "--prefill-rows", "--act-order"})
    EXPECT_FALSE(has(help.out, advanced)) << advanced << "\n" << help.out;
  const futr::test::FutrRun all = run_futr({"generate", "--help-all"});
  ASSERT_EQ(all.rc, 0) << all.err;
  EXPECT_TRUE(has(all.out, "Advanced")) << all.out;
  for (const char* advanced :
       {"--fp8-history", "--fp8-margin", "--calib-tokens", "--prefill-rows", "--act-order"})
    EXPECT_TRUE(has(all.out, advanced)) << advanced << "\n" << all.out;
}

TEST(FamiliarCli, ServeHelpShowsTheDefaults) {
  const futr::test::FutrRun r = run_futr({"serve", "--help"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* d :
       {"--host TEXT=127.0.0.1", "=8080", "--max-seqs INT:POSITIVE",
        "default 8 on the CPU engine, 32 on the GPU", "--max-queue INT=64 ",
        "--max-step-tokens INT:POSITIVE=256", "--drain-timeout FLOAT=30 ", "--max-body UINT=1048576",
        "--speculative TEXT:{auto,ngram,off}=auto", "--draft-max INT:INT in [1 - 64]"})
    EXPECT_TRUE(has(r.out, d)) << d << "\n" << r.out;
}

TEST(FamiliarCli, LlamaCppSpellingsRun) {
  REQUIRE_MODEL();
  const futr::test::FutrRun r = run_futr({"generate", "-p", "The capital of France is", "--temp", "0", "-n",
                                          "3", "--ctx-size", "128", "-t", "1", "-ngl", "99", "--ignore-eos"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.err, "-ngl ignored")) << r.err;
  EXPECT_TRUE(has(r.err, "context 128 tokens (--ctx")) << r.err;
  EXPECT_TRUE(has(r.err, "generation     3 tokens")) << r.err;
  // The same prompt from a file, and --n-predict: the same greedy text.
  const fs::path f = fs::temp_directory_path() / ("futr_prompt_" + std::to_string(::getpid()) + ".txt");
  { std::ofstream(f) << "The capital of France is"; }
  const futr::test::FutrRun from_file = run_futr(
      {"generate", "-f", f.string(), "--temperature", "0", "--n-predict", "3", "-c", "128", "-t", "1"});
  fs::remove(f);
  ASSERT_EQ(from_file.rc, 0) << from_file.err;
  EXPECT_EQ(from_file.out, r.out);
  // The prompt once only.
  const futr::test::FutrRun twice = run_futr({"generate", "hi", "-p", "there", "-n", "1"});
  EXPECT_EQ(twice.rc, 1);
  EXPECT_TRUE(has(twice.err, "give the prompt once")) << twice.err;
}

TEST(FamiliarCli, TheDefaultContextIsTheModelsCappedAndPrinted) {
  REQUIRE_MODEL();
  // SmolLM2 was trained on 8192 positions: the default is 4096 in every
  // command that holds a conversation.
  const futr::test::FutrRun g = run_futr({"generate", "hi", "--temp", "0", "-n", "1", "-t", "1"});
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_TRUE(has(g.err, "futr: context 4096 tokens (the model's trained context 8192, capped at 4096"))
      << g.err;
  const futr::test::FutrRun c = run_futr({"chat", "--temp", "0", "-n", "1", "-t", "1"}, "/exit\n");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(has(c.err, "futr: context 4096 tokens")) << c.err;
}

}  // namespace
