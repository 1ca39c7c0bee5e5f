// `futr generate` / `futr chat` with speculative decoding on the default model
// (SmolLM2-135M-Instruct Q4_1; skipped with the reason when it is absent): the
// text with --speculative ngram is byte for byte the text with
// --speculative off (greedy, sampled with a seed, a stop string, a context
// that fills up, two chat turns), the --json statistics count the drafts,
// and bad flags are refused before the model loads.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/run_futr.h"

namespace {

using futr::test::FutrRun;
using futr::test::run_futr;

#define REQUIRE_MODEL()                             \
  if (!std::filesystem::exists(FUTR_DEFAULT_MODEL)) \
  GTEST_SKIP() << "default model " << FUTR_DEFAULT_MODEL << " is absent: run scripts/fetch-model.sh"

const char* kCopyTask =
    "Repeat this list exactly, one item per line: apples, bananas, cherries, dates, elderberries, figs, "
    "grapes, honeydew melons, kiwis, lemons.";

// The last line of stderr parsed as JSON (--json).
nlohmann::json stats_of(const FutrRun& r) {
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  return nlohmann::json::parse(err.substr(err.rfind('\n') + 1));
}

// futr with `args` twice, --speculative off and ngram: the same stdout.
FutrRun same_text(std::vector<std::string> args, const std::string& input = "") {
  std::vector<std::string> off = args, on = args;
  off.insert(off.end(), {"--speculative", "off", "--json"});
  on.insert(on.end(), {"--speculative", "ngram", "--json"});
  const FutrRun a = run_futr(off, input), b = run_futr(on, input);
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
  return b;
}

TEST(SpeculativeCli, GreedyCopyTaskSameTextAndDraftsAccepted) {
  REQUIRE_MODEL();
  const FutrRun r = same_text({"generate", "--chat", kCopyTask, "--temperature", "0", "--max-tokens", "48"});
  const nlohmann::json j = stats_of(r);
  ASSERT_TRUE(j.contains("speculative")) << r.err;
  EXPECT_EQ(j["speculative"]["mode"], "ngram");
  EXPECT_GT(j["speculative"]["drafted"].get<int>(), 0) << r.err;
  EXPECT_GT(j["speculative"]["accepted"].get<int>(), 0) << r.err;
  EXPECT_GT(j["speculative"]["tokens_per_step"].get<double>(), 1.0) << r.err;
  EXPECT_LT(j["decode_steps"].get<int>(), j["generated"].get<int>()) << r.err;
}

TEST(SpeculativeCli, SampledWithASeedSameText) {
  REQUIRE_MODEL();
  same_text({"generate", "--chat", kCopyTask, "--temperature", "0.8", "--top-k", "40", "--top-p", "0.9",
             "--min-p", "0.02", "--repetition-penalty", "1.1", "--seed", "11", "--max-tokens", "40"});
}

TEST(SpeculativeCli, StopStringAndFullContextSameText) {
  REQUIRE_MODEL();
  same_text({"generate", "--chat", kCopyTask, "--temperature", "0", "--max-tokens", "48", "--stop", "figs"});
  const FutrRun r = same_text({"generate", "--chat", kCopyTask, "--temperature", "0", "--ctx", "72",
                               "--max-tokens", "200", "--draft-max", "16"});
  EXPECT_EQ(stats_of(r)["end"], "context_full") << r.err;
}

TEST(SpeculativeCli, ChatTurnsSameText) {
  REQUIRE_MODEL();
  const std::string turns = std::string(kCopyTask) + "\nNow repeat the same list in reverse order.\n";
  same_text({"chat", "--temperature", "0", "--max-tokens", "40"}, turns);
}

TEST(SpeculativeCli, BadFlagsAreRefused) {
  const FutrRun a = run_futr({"generate", "hi", "--draft-max", "0"});
  EXPECT_EQ(a.rc, 1);
  EXPECT_NE(a.err.find("--draft-max must be in [1, 64]"), std::string::npos) << a.err;
  const FutrRun b = run_futr({"generate", "hi", "--speculative", "eagle"});
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.err.find("--speculative"), std::string::npos) << b.err;
}

}  // namespace
