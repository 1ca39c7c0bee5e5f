// End to end: `futr quantize`, the quantized-reference options of `futr
// perplexity` / `futr generate`, the .futr file as a model, and the KL tool,
// on the default model (skipped with a reason when it is absent). Short
// texts and contexts keep it to seconds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/run_futr.h"

namespace {

namespace fs = std::filesystem;

using Result = futr::test::FutrRun;
using futr::test::slurp;

fs::path work_dir() {
  static const fs::path d = fs::temp_directory_path() / fmt::format("futr_quant_cli_{}", ::getpid());
  fs::create_directories(d);
  return d;
}

Result run(const std::vector<std::string>& args) { return futr::test::run_futr(args); }

// A short text: the first ~2 KB of the default perplexity text (or a fallback).
fs::path text_file() {
  const fs::path p = work_dir() / "text.txt";
  if (!fs::exists(p)) {
    std::string t = slurp(FUTR_TEST_TEXT).substr(0, 2400);
    if (t.size() < 1000)
      for (int i = 0; i < 40; ++i) t += "The quick brown fox jumps over the lazy dog. ";
    std::ofstream(p) << t;
  }
  return p;
}

nlohmann::json ppl(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"perplexity", text_file().string(), "--ctx", "64", "--max-tokens", "192",
                                "--json", "-q", "-t", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  const Result r = run(a);
  EXPECT_EQ(r.rc, 0) << r.err;
  return r.rc == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{{"ppl", -1.0}};
}

// One .futr with int4 (rtn) and fp8 weights for the whole suite.
const fs::path& futr_file() {
  static const fs::path p = work_dir() / "m.futr";
  if (!fs::exists(p)) {
    const Result r = run({"quantize", "-o", p.string(), "--weights", "int4,fp8", "--quant", "rtn",
                           "--calib-file", text_file().string(), "--calib-tokens", "64", "--calib-ctx",
                           "32", "-t", "2"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("wrote"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("format version 1"), std::string::npos) << r.err;
  }
  return p;
}

// Removes the work directory (the .futr file, texts, outputs) after the suite.
class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(work_dir(), ec);
  }
};
const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUp);

bool have_model() { return fs::exists(FUTR_DEFAULT_MODEL); }
#define REQUIRE_MODEL()                                                                    \
  if (!have_model())                                                                       \
  GTEST_SKIP() << "default model " << FUTR_DEFAULT_MODEL << " is absent: run scripts/fetch-model.sh"

}  // namespace

TEST(QuantCli, FutrFileComputesExactlyWhatQuantizingOnLoadComputes) {
  REQUIRE_MODEL();
  const fs::path& f = futr_file();
  ASSERT_TRUE(fs::exists(f));
  // The .futr file's INT4 weights are the RTN weights, its embedding/norms the
  // BF16 values the reference uses anyway: bit-identical perplexity.
  const auto a = ppl({"--weights", "int4", "--quant", "rtn", "--kv", "int4-rot"});
  const auto b = ppl({"-m", f.string(), "--kv", "int4-rot"});  // --weights auto: int4
  EXPECT_EQ(a["ppl"], b["ppl"]);
  EXPECT_NE(b["backend_detail"].get<std::string>().find("weights int4 (rtn g64/128)"), std::string::npos)
      << b["backend_detail"];
  // FP8 from the file (calibrated initial amax) runs and reports its scaling state.
  const auto c = ppl({"-m", f.string(), "--weights", "fp8"});
  EXPECT_GT(c["ppl"].get<double>(), 1.0);
  EXPECT_GT(c["fp8"]["calls"].get<int>(), 0);
}

TEST(QuantCli, KlBaseRoundTrip) {
  REQUIRE_MODEL();
  const std::string base = (work_dir() / "base.klb").string();
  const auto a = ppl({"--weights", "bf16", "--save-kl-base", base, "--kl-topk", "16"});
  ASSERT_TRUE(fs::exists(base));
  const auto same = ppl({"--weights", "bf16", "--kl-base", base});
  // Identical runs: zero up to the FP32 storage of the base's log-probabilities.
  EXPECT_NEAR(same["kl_mean"].get<double>(), 0.0, 1e-6);
  EXPECT_EQ(same["top1_agreement"].get<double>(), 1.0);
  EXPECT_NEAR(same["ppl_delta"].get<double>(), 0.0, 1e-5);
  EXPECT_EQ(same["kl_topk"], 16);
  const auto q = ppl({"--weights", "int4", "--kv", "int4", "--kl-base", base});
  EXPECT_GT(q["kl_mean"].get<double>(), 1e-4);
  EXPECT_LT(q["top1_agreement"].get<double>(), 1.0);
  EXPECT_NEAR(q["ppl_delta"].get<double>(), q["ppl"].get<double>() - a["ppl"].get<double>(), 1e-6);
  // A base made with another window plan is refused.
  const Result r = run({"perplexity", text_file().string(), "--ctx", "32", "--max-tokens", "192", "-q",
                         "--kl-base", base});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("the base run used ctx 64"), std::string::npos) << r.err;
}

TEST(QuantCli, GenerateAndInfoOnAFutrFile) {
  REQUIRE_MODEL();
  const Result g = run({"generate", "-m", futr_file().string(), "The capital of France is", "--temperature",
                         "0", "-n", "6", "-t", "2"});
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_NE(g.err.find("weights int4"), std::string::npos) << g.err;
  const Result i = run({"info", futr_file().string()});
  if (i.err.find("info") != std::string::npos && i.rc != 0 && i.err.find("subcommand") != std::string::npos)
    GTEST_SKIP() << "futr info is not built";
  ASSERT_EQ(i.rc, 0) << i.err;
  EXPECT_NE(i.out.find("INT4_G128"), std::string::npos) << i.out;
}

TEST(QuantCli, Errors) {
  REQUIRE_MODEL();
  auto err = [](const std::vector<std::string>& a, const std::string& msg) {
    const Result r = run(a);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
  };
  const std::string f = futr_file().string(), t = text_file().string();
  err({"perplexity", t, "-m", f, "--quant", "gptq", "--ctx", "32"}, "already quantized");
  err({"perplexity", t, "-m", f, "--weights", "bf16", "--ctx", "32"}, "holds no bf16 weights");
  err({"perplexity", t, "--weights", "bf16", "--kv-block", "16", "--ctx", "32"}, "--kv-block applies to --kv int4-rot");
  err({"perplexity", t, "--weights", "bf16", "--kv", "int4-rot", "--kv-block", "48", "--ctx", "32"},
      "--kv-block 48");
  err({"perplexity", t, "--weights", "bf16", "--quant", "rtn", "--ctx", "32"}, "need --weights int4");
  err({"quantize", "-o", (work_dir() / "x.futr").string(), "--weights", "int4,int4"}, "lists int4 twice");
  err({"quantize", "-o", (work_dir() / "x.futr").string(), "--weights", "fp8", "--quant", "gptq"},
      "apply to int4 weights");
  err({"perplexity", t, "--kl-base", (work_dir() / "missing.klb").string(), "--ctx", "32"}, "cannot open the KL base");
  // A .futr file is never written under a GGUF or safetensors name.
  const std::string gguf_name = (work_dir() / "x.GGUF").string();
  err({"quantize", "-o", gguf_name, "--weights", "int4"}, "writes a .futr file, not .gguf; name it");
  EXPECT_FALSE(std::filesystem::exists(gguf_name));
  err({"quantize", "-o", (work_dir() / "x.safetensors").string()}, "not .safetensors");
  // A missing calibration text names the flag that chooses it.
  err({"quantize", "-o", (work_dir() / "x.futr").string(), "--quant", "gptq", "--calib-file",
       (work_dir() / "missing.txt").string()},
      "give one with --calib-file");
}
