// The transformers cross-check: the CPU forward pass against logits computed
// by Hugging Face transformers (FP32) on random-weight Llama, Qwen2 (q/k/v
// biases) and Mistral models it built and saved (scripts/hf_crosscheck.py ->
// tests/data/hf_tiny/).
//
// Each directory is loaded with load_model() (the HF safetensors reader), run
//   (a) as one batch (prefill, logits for every position) and
//   (b) token by token through the KV cache (decode),
// and both are compared with golden.f32 by relative L2 error
// <= tol::kCpuVsTransformers (1e-4). The errors observed are printed and
// recorded in docs/CPU_BACKEND.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_engine/forward.h"
#include "formats/loader.h"
#include "support/compare.h"
#include "support/tolerances.h"

namespace futr::cpu {
namespace {

const std::filesystem::path kDir = std::filesystem::path(FUTR_TEST_DATA) / "hf_tiny";

struct Golden {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [T, vocab]
  int64_t vocab = 0;
};

Golden read_golden(const std::filesystem::path& dir) {
  Golden g;
  std::ifstream jf(dir / "golden.json");
  const auto j = nlohmann::json::parse(jf);
  g.tokens = j.at("tokens").get<std::vector<int32_t>>();
  const auto shape = j.at("shape").get<std::vector<int64_t>>();
  EXPECT_EQ(shape.at(0), int64_t(g.tokens.size()));
  g.vocab = shape.at(1);
  g.logits.resize(size_t(shape[0] * shape[1]));
  std::ifstream bf(dir / "golden.f32", std::ios::binary);
  bf.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(bf.good()) << "golden.f32 is shorter than golden.json's shape";
  return g;
}

class HfCrossCheck : public testing::TestWithParam<std::string> {};

TEST_P(HfCrossCheck, PrefillAndDecodeMatchTransformers) {
  const auto dir = kDir / GetParam();
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  const Golden g = read_golden(dir);
  const Model m = load_model(dir);
  ASSERT_EQ(m.config.vocab, g.vocab);
  const int T = int(g.tokens.size());

  Forward f(m, T);
  const Tensor all = f.eval_all(g.tokens);
  const auto e_prefill = test::compare({all.data.data(), all.data.size()}, g.logits);

  f.reset();
  std::vector<float> dec;
  for (int32_t t : g.tokens) {
    const Tensor l = f.eval_last(std::span<const int32_t>(&t, 1));
    dec.insert(dec.end(), l.data.begin(), l.data.end());
  }
  const auto e_decode = test::compare(dec, g.logits);

  std::printf("hf_crosscheck %-40s prefill rel_l2 %.3e max_abs %.3e | decode rel_l2 %.3e max_abs %.3e\n",
              GetParam().c_str(), e_prefill.rel_l2, e_prefill.max_abs, e_decode.rel_l2, e_decode.max_abs);
  RecordProperty("prefill_rel_l2", std::to_string(e_prefill.rel_l2));
  RecordProperty("decode_rel_l2", std::to_string(e_decode.rel_l2));
  EXPECT_EQ(e_prefill.non_finite, 0u);
  EXPECT_EQ(e_decode.non_finite, 0u);
  EXPECT_LE(e_prefill.rel_l2, test::tol::kCpuVsTransformers);
  EXPECT_LE(e_decode.rel_l2, test::tol::kCpuVsTransformers);
}

INSTANTIATE_TEST_SUITE_P(Models, HfCrossCheck,
                         testing::Values("gqa_hd64_tied_bf16", "gqa_hd128_untied_llama3_f16_sharded",
                                         "mqa_hd64_wide_heads_f32", "qwen2_gqa_hd64_bias_tied_bf16",
                                         "mistral_gqa_hd64_untied_f16"));

// Every model directory in tests/data/hf_tiny is in the list above.
TEST(HfCrossCheckData, EveryDirectoryIsTested) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kDir))
    if (e.is_directory()) ++n;
  EXPECT_EQ(n, 5) << "a model directory was added to tests/data/hf_tiny: add it to the list";
}

}  // namespace
}  // namespace futr::cpu
