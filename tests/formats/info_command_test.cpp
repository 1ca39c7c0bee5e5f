// `futr info` (cli/info_command.h): the memory arithmetic on the paper's
// Llama-3.1-8B shape, and the text / JSON reports on test models.
#include "cli/info_command.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/loader.h"

using namespace futr;

TEST(InfoCommand, MemoryLlama31_8B) {
  ModelConfig c;
  c.hidden = 4096, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128;
  c.intermediate = 14336, c.vocab = 128256, c.max_context = 131072, c.tied_embeddings = false;
  const cli::ModelMemory m = cli::model_memory(c);
  // Llama-3.1-8B: 218.1 M projection weights per layer (4096 x (6144 + 4096)
  // + 3 x 4096 x 14336).
  const uint64_t per_layer = 218103808, head = 128256ull * 4096;
  EXPECT_EQ(m.quantized, 32 * per_layer + head);
  EXPECT_EQ(m.params, 8030261248ull);  // the published Llama-3.1-8B parameter count
  EXPECT_EQ(m.bf16, m.params * 2);
  EXPECT_EQ(m.fp32, m.params * 4);
  EXPECT_EQ(m.int4_group, 128);
  const uint64_t kept = (m.params - m.quantized) * 2;
  // Per layer: 1 byte per weight + 4 bytes per output row (7 matrices: rows
  // 4096+1024+1024+4096+14336*2+4096).
  const uint64_t rows = 4096 + 1024 + 1024 + 4096 + 14336 * 2 + 4096;
  EXPECT_EQ(m.fp8, 32 * (per_layer + rows * 4) + head + 128256 * 4 + kept);
  // INT4: half a byte per weight + 2 bytes per 128 weights.
  EXPECT_EQ(m.int4, 32 * (per_layer / 2 + per_layer / 128 * 2) + head / 2 + head / 128 * 2 + kept);
}

TEST(InfoCommand, Int4GroupFollowsK) {
  ModelConfig c;
  c.hidden = 576, c.n_layers = 1, c.n_heads = 9, c.n_kv_heads = 3, c.head_dim = 64;
  c.intermediate = 1536, c.vocab = 100, c.tied_embeddings = true;
  EXPECT_EQ(cli::model_memory(c).int4_group, 64);  // 576 = 4.5 x 128
}

TEST(InfoCommand, Reports) {
  const Model m = inspect_model(std::string(FUTR_TEST_DATA) + "/hf_tiny/gqa_hd128_untied_llama3_f16_sharded");
  const std::string t = cli::info_text(m, true);
  for (const char* s : {"hf-safetensors", "heads / kv heads      2 / 1 (MQA)", "head dim              128",
                        "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original context 64)",
                        "F16        21 tensors", "parameters: 1.05 M (1049856)", "separate LM head",
                        "lm_head.weight", "(none in this model)"})
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
  const nlohmann::json j = nlohmann::json::parse(cli::info_json(m));
  EXPECT_EQ(j["config"]["head_dim"], 128);
  EXPECT_EQ(j["parameters"]["total"], 1049856);
  EXPECT_EQ(j["tensor_types"]["F16"]["tensors"], 21);
  EXPECT_EQ(j["tensors"].size(), 21u);
  EXPECT_EQ(j["memory_bytes"]["files"].get<uint64_t>(), cli::model_file_bytes(m));
  EXPECT_GT(cli::model_file_bytes(m), 2099712u);  // the tensor bytes plus 10 headers
}

TEST(InfoCommand, RealModel) {
  if (!std::filesystem::exists(FUTR_DEFAULT_MODEL))
    GTEST_SKIP() << "default model absent (" FUTR_DEFAULT_MODEL "): run scripts/fetch-model.sh";
  const Model m = inspect_model(FUTR_DEFAULT_MODEL);
  const std::string t = cli::info_text(m, false);
  for (const char* s : {"Q4_1      210 tensors", "parameters: 134.52 M (134515008)", "INT4 g64",
                        "tied (LM head = token embedding)", "1 '<|im_start|>'", "49152 / 48900"})
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
  EXPECT_EQ(cli::model_file_bytes(m), 98362432u);
}
