// The CPU forward pass (cpu_engine/forward.h) on random tiny models (Llama
// variants and a Qwen2 with q/k/v biases): against the
// naive double-precision reference (tests/cpu_engine/tiny_model.h), prefill vs
// token-by-token decode through the KV cache, chunking, and the context and
// vocabulary errors.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "cpu_engine/forward.h"
#include "cpu_engine/threads.h"
#include "support/compare.h"
#include "tiny_model.h"

namespace futr::cpu {
namespace {

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

std::span<const float> rows(const Tensor& t) { return {t.data.data(), t.data.size()}; }

// Decode one token at a time; the logits of every step stacked [n, vocab].
std::vector<float> decode_all(Forward& f, const std::vector<int32_t>& tokens) {
  std::vector<float> out;
  for (int32_t t : tokens) {
    const Tensor l = f.eval_last(std::span<const int32_t>(&t, 1));
    out.insert(out.end(), l.data.begin(), l.data.end());
  }
  return out;
}

struct Case {
  const char* name;
  ModelConfig config;
};

std::vector<Case> cases() {
  std::vector<Case> cs;
  cs.push_back({"gqa_hd16_untied", test::tiny_config()});
  ModelConfig tied = test::tiny_config();
  tied.tied_embeddings = true;
  tied.n_kv_heads = 1;  // MQA
  cs.push_back({"mqa_tied", tied});
  ModelConfig l3 = test::tiny_config();
  l3.rope_theta = 500000.0f;
  l3.rope_scaling.type = "llama3";
  l3.rope_scaling.factor = 8.0f;
  l3.rope_scaling.original_max_position = 16;  // so that short sequences see the blend
  l3.n_heads = 4;
  l3.n_kv_heads = 4;  // MHA
  l3.head_dim = 32;
  cs.push_back({"mha_llama3", l3});
  ModelConfig qwen2 = test::tiny_config();  // biases on q, k and v; Qwen2's rope theta, tied head
  qwen2.arch = "qwen2";
  qwen2.qkv_bias = true;
  qwen2.rope_theta = 1000000.0f;
  qwen2.tied_embeddings = true;
  cs.push_back({"qwen2_bias_tied", qwen2});
  return cs;
}

TEST(CpuForward, MatchesNaiveReferenceAndDecode) {
  set_num_threads(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Model m = test::random_model(c.config, std::random_device{}());
    const auto tokens = random_tokens(40, c.config.vocab, std::random_device{}());
    const auto ref_d = test::naive_forward(m, tokens);
    const std::vector<float> ref(ref_d.begin(), ref_d.end());

    Forward f(m, 64);
    const Tensor all = f.eval_all(tokens);
    ASSERT_EQ(all.shape, (std::vector<int64_t>{40, c.config.vocab}));
    EXPECT_EQ(f.position(), 40);
    const auto e_prefill = test::compare(rows(all), ref);
    EXPECT_EQ(e_prefill.non_finite, 0u);
    EXPECT_LT(e_prefill.rel_l2, 1e-5);

    f.reset();
    const auto dec = decode_all(f, tokens);
    const auto e_decode = test::compare(dec, ref);
    EXPECT_LT(e_decode.rel_l2, 1e-5);
    // Prefill and decode are the same computation up to BLAS summation order.
    EXPECT_LT(test::compare(dec, rows(all)).rel_l2, 1e-5);
  }
}

// The GPU prefill path's BF16 activations (Forward::set_bf16_activations): with
// it, every V row stored in an FP32 cache is BF16-representable (v is rounded
// after its projection and stored as is); without it, nearly none is; the
// logits move, by about a BF16 rounding's worth, not more.
TEST(CpuForward, Bf16ActivationsRoundWhatTheGpuStores) {
  const ModelConfig cfg = test::tiny_config();
  const Model m = test::random_model(cfg, 11);
  const auto tokens = random_tokens(24, cfg.vocab, 12);
  Forward plain(m, 64), rounded(m, 64);
  rounded.set_bf16_activations(true);
  EXPECT_TRUE(rounded.bf16_activations());
  const Tensor a = plain.eval_all(tokens), b = rounded.eval_all(tokens);
  auto bf16_rows = [&](Forward& f) {
    int64_t exact = 0, total = 0;
    for (int l = 0; l < cfg.n_layers; ++l) {
      const KvLayerView view = f.cache().storage().read(l, 24);
      for (const KvHeadView& h : view.heads)
        for (int t = 0; t < view.len; ++t)
          for (int d = 0; d < cfg.head_dim; ++d) {
            const float v = h.v[t * h.ld + d];
            exact += round_bf16(v) == v ? 1 : 0;
            ++total;
          }
    }
    return double(exact) / double(total);
  };
  EXPECT_EQ(bf16_rows(rounded), 1.0);
  EXPECT_LT(bf16_rows(plain), 0.05);
  const double d = test::compare(rows(b), rows(a)).rel_l2;
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.05);
}

TEST(CpuForward, ChunksAndPartialLogits) {
  const ModelConfig cfg = test::tiny_config();
  const Model m = test::random_model(cfg, 7);
  const auto tokens = random_tokens(50, cfg.vocab, 8);
  Forward whole(m, 64);
  const Tensor ref = whole.eval_all(tokens);

  // Internal chunking (max_batch 7) gives the same logits.
  Forward chunked(m, make_weights(m), make_fp32_kv_storage(cfg, 64), 7);
  const Tensor c = chunked.eval_all(tokens);
  EXPECT_LT(test::compare(rows(c), rows(ref)).rel_l2, 1e-6);

  // Prompt in three calls; only rows [first, n) of each call are returned.
  Forward parts(m, 64);
  std::span<const int32_t> t(tokens);
  const Tensor a = parts.eval(t.subspan(0, 20), 20);  // no logits
  EXPECT_TRUE(a.empty());
  const Tensor b = parts.eval(t.subspan(20, 25), 5);   // rows 25..44
  const Tensor l = parts.eval_last(t.subspan(45, 5));  // row 49
  ASSERT_EQ(b.dim(0), 20);
  ASSERT_EQ(l.dim(0), 1);
  const size_t V = size_t(cfg.vocab);
  std::vector<float> ref_b(ref.data.begin() + 25 * V, ref.data.begin() + 45 * V);
  std::vector<float> ref_l(ref.data.begin() + 49 * V, ref.data.end());
  EXPECT_LT(test::compare(rows(b), ref_b).rel_l2, 1e-5);
  EXPECT_LT(test::compare(rows(l), ref_l).rel_l2, 1e-5);

  // Truncate and re-run the suffix.
  parts.truncate(45);
  const Tensor l2 = parts.eval_last(t.subspan(45, 5));
  EXPECT_LT(test::compare(rows(l2), ref_l).rel_l2, 1e-6);
}

TEST(CpuForward, ContextAndVocabularyErrors) {
  const ModelConfig cfg = test::tiny_config();
  const Model m = test::random_model(cfg, 3);
  Forward f(m, 8);
  EXPECT_EQ(f.capacity(), 8);
  const auto tokens = random_tokens(9, cfg.vocab, 4);
  std::span<const int32_t> t(tokens);
  try {
    f.eval_all(t);
    FAIL() << "expected a context error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context length exceeded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f.position(), 0);  // nothing changed
  f.eval_last(t.subspan(0, 5));
  EXPECT_THROW(f.eval_last(t.subspan(5, 4)), Error);  // 5 + 4 > 8
  EXPECT_EQ(f.position(), 5);
  f.eval_last(t.subspan(5, 3));  // exactly full
  EXPECT_EQ(f.position(), 8);
  EXPECT_THROW(f.eval_last(t.subspan(8, 1)), Error);

  f.reset();
  std::vector<int32_t> bad = {1, cfg.vocab};
  EXPECT_THROW(f.eval_last(bad), Error);
  EXPECT_EQ(f.position(), 0);
  EXPECT_THROW(f.eval(t.subspan(0, 3), 4), Error);  // first logit row beyond the batch
}

TEST(CpuForward, RejectsInconsistentWeights) {
  const ModelConfig cfg = test::tiny_config();
  Model m = test::random_model(cfg, 5);
  m.weights.layers[1].wk = Tensor({cfg.kv_dim() + 1, cfg.hidden});
  try {
    Forward f(m, 16);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_k"), std::string::npos) << e.what();
  }
  Model u = test::random_model(cfg, 5);
  u.weights.lm_head = Tensor();  // untied without an LM head
  EXPECT_THROW(Forward(u, 16), Error);
  ModelConfig qcfg = test::tiny_config();
  qcfg.arch = "qwen2";
  qcfg.qkv_bias = true;
  Model q = test::random_model(qcfg, 5);
  q.weights.layers[0].bk = Tensor();  // a qwen2 layer without its k bias
  try {
    Forward f(q, 16);
    FAIL() << "expected a missing-bias error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_k.bias"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace futr::cpu
