// End to end: `futr quantize`, the quantized-reference options of `futr
// perplexity` / `futr generate`, the .futr file as a model, and the KL tool,
// on the default model (skipped with a reason when it is absent), and the
// default INT4 recipe of `futr quantize` on the tiny model of tests/data (never
// a default, GPTQ, quantization of the default model: ~15 minutes). Short
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

#include "formats/futr_file.h"

#include "formats/futr_file.h"
#include "support/run_futr.h"
#include "support/scratch_dir.h"
#include "tokenizer/test_util.h"

namespace {

namespace fs = std::filesystem;

using Result = futr::test::FutrRun;
using futr::test::slurp;

// The scratch directory (the .futr file, texts, outputs), removed after the suite.
const fs::path& work_dir() { return futr::test::scratch_dir("quant_cli"); }

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
  std::vector<std::string> a = {
      "perplexity", text_file().string(), "--ctx", "64", "--max-tokens", "192", "--json", "-q", "-t", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  const Result r = run(a);
  EXPECT_EQ(r.rc, 0) << r.err;
  return r.rc == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{{"ppl", -1.0}};
}

// One .futr with int4 (rtn) and fp8 weights for the whole suite.
const fs::path& futr_file() {
  static const fs::path p = work_dir() / "m.futr";
  if (!fs::exists(p)) {
    const Result r =
        run({"quantize", "-o", p.string(), "--weights", "int4,fp8", "--quant", "rtn", "--calib-file",
             text_file().string(), "--calib-tokens", "64", "--calib-ctx", "32", "-t", "2"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("wrote"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(fmt::format("format version {}", futr::kFutrFormatVersion)), std::string::npos)
        << r.err;
  }
  return p;
}

bool have_model() { return fs::exists(FUTR_DEFAULT_MODEL); }
#define REQUIRE_MODEL() \
  if (!have_model())    \
  GTEST_SKIP() << "default model " << FUTR_DEFAULT_MODEL << " is absent: run scripts/fetch-model.sh"

// The tiny Hugging Face model of tests/data (2 layers, hidden 256) with a
// byte-level tokenizer.json (256 byte tokens, no merges), so that it can
// calibrate: a GPTQ quantization of it takes well under a second.
fs::path tiny_model_with_tokenizer() {
  const fs::path d = work_dir() / "tiny_hf";
  if (!fs::exists(d)) {
    fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / "gqa_hd64_tied_bf16", d, fs::copy_options::recursive);
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[futr::test::byte_char(uint8_t(b))] = b;
    const nlohmann::json tok = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
    std::ofstream(d / "tokenizer.json") << tok.dump();
  }
  return d;
}

// `futr quantize` of the tiny model with `extra`; returns the INT4 step of
// the file's provenance ({} on failure) and the stderr in `err`.
nlohmann::json quantize_tiny(const std::string& name, const std::vector<std::string>& extra,
                             std::string& err) {
  const fs::path out = work_dir() / name;
  std::vector<std::string> a = {"quantize",
                                "-m",
                                tiny_model_with_tokenizer().string(),
                                "-o",
                                out.string(),
                                "--calib-file",
                                text_file().string(),
                                "--calib-tokens",
                                "128",
                                "--calib-ctx",
                                "32",
                                "-t",
                                "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  const Result r = run(a);
  err = r.err;
  EXPECT_EQ(r.rc, 0) << r.err;
  if (r.rc != 0) return {};
  const futr::FutrFile f(out);
  for (const auto& s : f.header().at("provenance").at("steps"))
    if (s.at("format") == "int4") return s;
  ADD_FAILURE() << "no int4 step in the provenance of " << out;
  return {};
}

}  // namespace

// The default INT4 recipe of `futr quantize` is the calibrated one that meets
// cross-domain target of docs/ACCURACY.md: gptq-clip, act-order on.
TEST(QuantCli, DefaultRecipeIsGptqClipWithActOrder) {
  std::string err;
  const auto d = quantize_tiny("default.futr", {}, err);
  EXPECT_EQ(d.value("quant", ""), "gptq-clip") << d;
  EXPECT_EQ(d.value("act_order", false), true) << d;
  EXPECT_EQ(d.value("method", "").rfind("gptq+clip,act-order g", 0), 0u) << d;
  EXPECT_TRUE(d.contains("calibration")) << d;
  EXPECT_NE(err.find("int4 recipe --quant gptq-clip --act-order (the default"), std::string::npos) << err;
  // --no-act-order turns act-order off; --quant rtn needs no calibration and has none.
  const auto n = quantize_tiny("noao.futr", {"--no-act-order"}, err);
  EXPECT_EQ(n.value("quant", ""), "gptq-clip") << n;
  EXPECT_EQ(n.value("act_order", true), false) << n;
  EXPECT_EQ(n.value("method", "").rfind("gptq+clip g", 0), 0u) << n;
  const auto g = quantize_tiny("gptq.futr", {"--quant", "gptq"}, err);  // act-order on for every GPTQ method
  EXPECT_EQ(g.value("method", "").rfind("gptq,act-order g", 0), 0u) << g;
  const auto r = quantize_tiny("rtn.futr", {"--quant", "rtn"}, err);
  EXPECT_EQ(r.value("quant", ""), "rtn") << r;
  EXPECT_EQ(r.value("act_order", true), false) << r;
  EXPECT_FALSE(r.contains("calibration")) << r;
  EXPECT_EQ(err.find("calibration:"), std::string::npos) << err;
  // Act-order is refused where it does not apply, before the model is read.
  const Result bad = run({"quantize", "-m", tiny_model_with_tokenizer().string(), "-o",
                          (work_dir() / "bad.futr").string(), "--quant", "rtn", "--act-order"});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("--act-order applies to gptq and gptq-clip (asked: --quant rtn)"), std::string::npos)
      << bad.err;
  const Result fp8 = run({"quantize", "-m", tiny_model_with_tokenizer().string(), "-o",
                          (work_dir() / "bad.futr").string(), "--weights", "fp8", "--no-act-order"});
  EXPECT_EQ(fp8.rc, 1);
  EXPECT_NE(fp8.err.find("apply to int4 weights"), std::string::npos) << fp8.err;
}

// Quantizing on load stays RTN (fast) and says which recipe it used.
TEST(QuantCli, QuantizingOnLoadIsRtnAndSaysSo) {
  const Result r =
      run({"perplexity", text_file().string(), "-m", tiny_model_with_tokenizer().string(), "--weights",
           "int4", "--ctx", "32", "--max-tokens", "96", "-t", "1", "--backend", "cpu"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("quantizing to int4 on load (rtn: fast, uncalibrated; `futr quantize`"),
            std::string::npos)
      << r.err;
}

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
  const Result r = run(
      {"perplexity", text_file().string(), "--ctx", "32", "--max-tokens", "192", "-q", "--kl-base", base});
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
  err({"perplexity", t, "--weights", "bf16", "--kv-block", "16", "--ctx", "32"},
      "--kv-block applies to --kv int4-rot");
  err({"perplexity", t, "--weights", "bf16", "--kv", "int4-rot", "--kv-block", "48", "--ctx", "32"},
      "--kv-block 48");
  err({"perplexity", t, "--weights", "bf16", "--quant", "rtn", "--ctx", "32"}, "need --weights int4");
  err({"quantize", "-o", (work_dir() / "x.futr").string(), "--weights", "int4,int4"}, "lists int4 twice");
  err({"quantize", "-o", (work_dir() / "x.futr").string(), "--weights", "fp8", "--quant", "gptq"},
      "apply to int4 weights");
  err({"perplexity", t, "--kl-base", (work_dir() / "missing.klb").string(), "--ctx", "32"},
      "cannot open the KL base");
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
