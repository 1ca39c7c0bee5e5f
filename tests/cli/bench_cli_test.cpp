// `futr bench` (src/cli/bench.cpp) end to end on `--synthetic tiny` with the
// CPU engines (the FP32 reference and the quantized reference), so it costs
// seconds and needs no model file: every list is swept (one row per prompt
// length, generation length, and batch x context), the markdown table and the
// JSON agree, repetitions are counted, and bad requests exit 1 with a
// message (the big synthetic models on the CPU, unknown names, empty or
// out-of-range lists, --synthetic with --model).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/run_futr.h"

namespace {

namespace fs = std::filesystem;
using futr::test::run_futr;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(FutrBench, SweepsEveryListIntoTheTableAndTheJson) {
  const fs::path json = fs::temp_directory_path() / ("futr_bench_" + std::to_string(::getpid()) + ".json");
  const futr::test::FutrRun r =
      run_futr({"bench", "--synthetic", "tiny", "--backend", "cpu", "-p", "16,8", "-n", "6", "-b", "1,3",
                "--ctx-list", "0,20", "--steps", "3", "-r", "2", "--json", json.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("loaded in"), std::string::npos) << r.err;
  // Progress as it goes: one stderr line per test, numbered, with its rate.
  EXPECT_NE(r.err.find("futr: bench: 7 tests, each one warm-up + 2 repetitions"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("futr: bench [1/7] pp16: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("futr: bench [3/7] tg6: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("futr: bench [7/7] decode batch 3 ctx 20: "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("| model | engine | weights | kv | test | batch | ctx | t/s | ms/step |"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count(r.out, "| pp16 |"), 1) << r.out;
  EXPECT_EQ(count(r.out, "| pp8 |"), 1) << r.out;
  EXPECT_EQ(count(r.out, "| tg6 |"), 1) << r.out;
  EXPECT_EQ(count(r.out, "| decode |"), 4) << r.out;  // 2 batches x 2 contexts
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\| decode \| 3 \| 20 \| [0-9.]+ ± [0-9.]+ \|)")))
      << r.out;

  const nlohmann::json j = nlohmann::json::parse(futr::test::slurp(json.string()));
  fs::remove(json);
  EXPECT_EQ(j["model"], "synthetic tiny");
  EXPECT_EQ(j["engine"], "cpu");
  EXPECT_GT(j["load_s"].get<double>(), 0.0);
  ASSERT_EQ(j["results"].size(), 7u);
  for (const auto& row : j["results"]) {
    EXPECT_EQ(row["reps"], 2);
    EXPECT_EQ(row["seconds"].size(), 2u);
    EXPECT_GT(row["tokens_per_s"]["mean"].get<double>(), 0.0) << row.dump();
    EXPECT_GE(row["ms_per_step"]["stdev"].get<double>(), 0.0) << row.dump();
  }
  const auto& last = j["results"].back();
  EXPECT_EQ(last["test"], "decode");
  EXPECT_EQ(last["batch"], 3);
  EXPECT_EQ(last["ctx"], 20);
  EXPECT_EQ(last["steps"], 3);
}

TEST(FutrBench, QuantizedReferenceAndJsonOnStdout) {
  const futr::test::FutrRun r =
      run_futr({"bench",    "--synthetic", "tiny", "--backend", "cpu", "--weights", "int4", "--kv",
                "int4-rot", "-p",          "8",    "-n",        "0",   "-b",        "2",    "--ctx-list",
                "4",        "--steps",     "2",    "-r",        "1",   "--json",    "-",    "-q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // -q
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["weights"], "int4");
  EXPECT_EQ(j["kv"], "int4-rot");
  ASSERT_EQ(j["results"].size(), 2u);  // pp8, decode b2 c4 (-n 0 skips)
  EXPECT_EQ(j["results"][0]["test"], "pp8");
}

TEST(FutrBench, PackedPromptsCountEveryPromptsTokens) {
  // 3 prompts of 8 tokens in the same steps: the row says batch 3, and the
  // tokens per repetition are 24 (tokens/s = 24 / t).
  const futr::test::FutrRun r = run_futr(
      {"bench", "--synthetic", "tiny", "--backend",  "cpu", "-p",      "8", "-n", "0", "--prompt-batch",
       "3",     "-b",          "1",    "--ctx-list", "0",   "--steps", "1", "-r", "1", "--json",
       "-",     "-q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_GE(j["results"].size(), 1u);
  const auto& pp = j["results"][0];
  EXPECT_EQ(pp["test"], "pp8");
  EXPECT_EQ(pp["batch"], 3);
  const double t = pp["seconds"][0].get<double>();
  EXPECT_NEAR(pp["tokens_per_s"]["mean"].get<double>() * t, 24.0, 1e-6 * 24.0) << pp.dump();
}

TEST(FutrBench, RefusesWhatItCannotRun) {
  auto expect_error = [](const std::vector<std::string>& args, const std::string& what) {
    const futr::test::FutrRun r = run_futr(args);
    EXPECT_EQ(r.rc, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << "wanted '" << what << "' in: " << r.err;
  };
  expect_error({"bench", "--synthetic", "llama-3.1-8b", "--backend", "cpu"}, "generated on the GPU only");
  expect_error({"bench", "--synthetic", "llama-9"}, "--synthetic");
  expect_error({"bench", "--synthetic", "tiny", "--backend", "cpu", "-b", "0"},
               "-b/--batch: 0 is out of range");
  expect_error({"bench", "--synthetic", "tiny", "--backend", "cpu", "-r", "0"}, "repetitions");
  expect_error({"bench", "--synthetic", "tiny", "--model", "x.gguf"}, "exclusive");
  expect_error({"bench", "--synthetic", "tiny", "--backend", "cpu", "--ctx", "8", "-p", "64"}, "too small");
  expect_error({"bench", "--synthetic", "tiny", "--backend", "cpu", "--prompt-batch", "0"},
               "--prompt-batch 0");
  expect_error({"bench", "--synthetic", "tiny", "--backend", "cpu", "--prefill-rows", "4096"},
               "--prefill-rows 4096: prefill chunks are the GPU engine's");
  expect_error({"bench", "--synthetic", "tiny", "--prefill-rows", "8"}, "--prefill-rows");
}

}  // namespace
