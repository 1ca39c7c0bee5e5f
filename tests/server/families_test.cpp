// `futr serve` for model families beyond Llama: the tiny random Qwen2 (q/k/v
// biases) and Mistral checkpoints (tests/support/tiny_families.h) behind the
// HTTP server on both engines (the GPU engine: `--backend auto` on a Hopper
// GPU, skipped without one): a chat completion rendered through the family's
// template and a text completion, 200 with the OpenAI shape, the usage
// counted, greedy twice the same text, and the family's eos ending a
// generation as a stop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "served_model.h"
#include "support/scratch_dir.h"
#include "support/tiny_families.h"

namespace futr {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path& work_dir() { return test::scratch_dir("families_serve"); }

void serves(const test::TinyFamily& f, runtime::EngineKind engine) {
  SCOPED_TRACE(f.dir);
  test::ServedModelOptions o;
  o.model = test::tiny_family_dir(f, work_dir()).string();
  o.engine.engine = engine;
  o.engine.ctx = 256;
  o.engine.max_seqs = 4;
  o.engine.threads = 2;
  std::string why;
  const auto served = test::ServedModel::start(o, &why);
  ASSERT_TRUE(served) << why;
  if (engine == runtime::EngineKind::kAuto && served->engine().info().name != "gpu")
    GTEST_SKIP() << "no Hopper GPU: --backend auto is the CPU engine (the cpu cases)";
  EXPECT_EQ(served->model().config.arch, std::string(f.dir).starts_with("qwen2") ? "qwen2" : "llama");
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hello there"}}})},
                     {"max_tokens", 8},
                     {"temperature", 0}};
  const json a = served->post("/v1/chat/completions", chat), b = served->post("/v1/chat/completions", chat);
  ASSERT_TRUE(a.contains("choices")) << a.dump();
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_EQ(a["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]) << "greedy twice";
  // The prompt as the family's template renders it: more tokens than the message's bytes.
  EXPECT_GT(a["usage"]["prompt_tokens"].get<int>(), int(std::string("Hello there").size()));
  const std::string finish = a["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  const json c =
      served->post("/v1/completions", {{"prompt", "The capital of"}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_TRUE(c.contains("choices")) << c.dump();
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["usage"]["prompt_tokens"].get<int>() > 0, true);
}

class ServeFamilies : public ::testing::TestWithParam<runtime::EngineKind> {};

TEST_P(ServeFamilies, Qwen2) { serves(test::kTinyQwen2, GetParam()); }

TEST_P(ServeFamilies, Mistral) { serves(test::kTinyMistral, GetParam()); }

TEST_P(ServeFamilies, Llama2SentencePiece) { serves(test::kTinyLlama2, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Engine, ServeFamilies,
                         ::testing::Values(runtime::EngineKind::kCpu, runtime::EngineKind::kAuto),
                         [](const ::testing::TestParamInfo<runtime::EngineKind>& i) {
                           return i.param == runtime::EngineKind::kCpu ? std::string("cpu")
                                                                       : std::string("gpu");
                         });

}  // namespace
}  // namespace futr
