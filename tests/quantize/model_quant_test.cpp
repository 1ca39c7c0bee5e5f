// Whole-model quantization and the quantized reference model
// (src/quantize/quantize.h, src/cpu_engine/quant_forward.h) on a small random Llama: folding the RMSNorm gain
// leaves the BF16 model's output unchanged within rounding; each format runs
// and stays close to FP32; GPTQ (layer-by-layer calibration through the
// forward pass) beats RTN on the model's logits; FP8 calibration records the
// initial amax.
#include "cpu_engine/quant_forward.h"
#include "quantize/quantize.h"

#include <gtest/gtest.h>

#include "core/numeric.h"
#include "cpu_engine/quant_model.h"
#include "support/compare.h"
#include "support/expect_error.h"

using namespace futr;
using namespace futr::cpu;

namespace {

// The random test model with its projections scaled down (x0.5), so errors do
// not compound chaotically through the layers.
Model tame_model(const ModelConfig& c, uint32_t seed) {
  Model m = test::random_model(c, seed);
  for (LayerWeights& L : m.weights.layers)
    for (Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      for (float& v : w->data) v *= 0.5f;
  return m;
}

std::vector<int32_t> tokens_of(int n, int vocab, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((i * 31 + seed * 7 + (i * i) % 13) % vocab));
  return t;
}

Tensor run(const Model& m, std::shared_ptr<const quant::QuantizedWeights> q, WeightFormat f,
           const std::vector<int32_t>& tokens, KvFormat kv = KvFormat::kFp32) {
  QuantRunOptions o;
  o.weights = f;
  o.kv = kv;
  QuantForward qf(m, std::move(q), o, 128);
  return qf.forward().eval_all(tokens);
}

}  // namespace

// W' = W diag(g) with the gain set to 1 computes the same function: in FP32
// exactly up to rounding, and in the BF16 model within BF16 rounding.
TEST(ModelQuant, FoldingTheNormGainKeepsTheBf16Output) {
  const ModelConfig c = test::quant_config();
  const Model m = test::random_model(c, 3);
  Model folded = m;
  for (LayerWeights& L : folded.weights.layers) {
    auto fold = [](Tensor& w, const Tensor& g) {
      for (int64_t r = 0; r < w.dim(0); ++r)
        for (int64_t k = 0; k < w.dim(1); ++k) w.data[size_t(r * w.dim(1) + k)] *= g.data[size_t(k)];
    };
    for (Tensor* w : {&L.wq, &L.wk, &L.wv}) fold(*w, L.attn_norm);
    for (Tensor* w : {&L.w_gate, &L.w_up}) fold(*w, L.ffn_norm);
    for (auto& v : L.attn_norm.data) v = 1.0f;
    for (auto& v : L.ffn_norm.data) v = 1.0f;
  }
  const auto tokens = tokens_of(48, c.vocab, 1);
  const Tensor a32 = run(m, nullptr, WeightFormat::kFp32, tokens);
  const Tensor b32 = run(folded, nullptr, WeightFormat::kFp32, tokens);
  EXPECT_LT(test::compare(b32.data, a32.data).rel_l2, 1e-5);
  const Tensor a16 = run(m, nullptr, WeightFormat::kBf16, tokens, KvFormat::kBf16);
  const Tensor b16 = run(folded, nullptr, WeightFormat::kBf16, tokens, KvFormat::kBf16);
  const double e16 = test::compare(a16.data, a32.data).rel_l2;
  const double fold16 = test::compare(b16.data, a16.data).rel_l2;
  // BF16 rounding of W' instead of W: of the order of the BF16 model's own rounding error.
  EXPECT_LT(fold16, 3.0 * e16 + 1e-3) << "bf16 vs fp32 " << e16;
}

TEST(ModelQuant, EachFormatRunsCloseToFp32) {
  const ModelConfig c = test::quant_config();
  const Model m = tame_model(c, 4);
  const auto tokens = tokens_of(64, c.vocab, 2);
  const Tensor ref = run(m, nullptr, WeightFormat::kFp32, tokens);
  QuantizeOptions o;
  for (auto f : {WeightFormat::kBf16, WeightFormat::kFp8, WeightFormat::kInt4}) {
    o.format = f;
    auto q = std::make_shared<quant::QuantizedWeights>(quantize_model(m, o, {}));
    EXPECT_EQ(q->tensors.size(), size_t(7 * c.n_layers));
    const Tensor out = run(m, q, f, tokens, KvFormat::kBf16);
    const double err = test::compare(out.data, ref.data).rel_l2;
    EXPECT_LT(err, f == WeightFormat::kInt4 ? 0.3 : 0.1) << to_string(f);
  }
  // FP8: the q/k/v and gate/up tensors carry the folded gain, o and down do not.
  o.format = WeightFormat::kFp8;
  const quant::QuantizedWeights q8 = quantize_model(m, o, {});
  EXPECT_TRUE(q8.at({0, Projection::kK}).fp8.folded_gain);
  EXPECT_TRUE(q8.at({1, Projection::kUp}).fp8.folded_gain);
  EXPECT_FALSE(q8.at({1, Projection::kO}).fp8.folded_gain);
  EXPECT_FALSE(q8.at({0, Projection::kDown}).fp8.folded_gain);
  // Group sizes: hidden 128 -> 128, intermediate 192 -> 64.
  o.format = WeightFormat::kInt4;
  const quant::QuantizedWeights q4 = quantize_model(m, o, {});
  EXPECT_EQ(q4.at({0, Projection::kQ}).int4.group, 128);
  EXPECT_EQ(q4.at({0, Projection::kDown}).int4.group, 64);
}

TEST(ModelQuant, GptqBeatsRtnOnTheModel) {
  const ModelConfig c = test::quant_config();
  const Model m = tame_model(c, 5);
  const auto calib = tokens_of(4 * 64, c.vocab, 9);
  const auto eval = tokens_of(64, c.vocab, 3);
  const Tensor ref = run(m, nullptr, WeightFormat::kFp32, eval);
  QuantizeOptions o;
  o.format = WeightFormat::kInt4;
  o.calib_ctx = 64;
  auto err_of = [&](QuantMethod method) {
    o.method = method;
    auto q = std::make_shared<quant::QuantizedWeights>(quantize_model(m, o, calib));
    EXPECT_EQ(q->method.rfind(quant_method_label(method, false), 0), 0u) << q->method;
    return test::compare(run(m, q, WeightFormat::kInt4, eval).data, ref.data).rel_l2;
  };
  const double rtn = err_of(QuantMethod::kRtn), gptq = err_of(QuantMethod::kGptq),
               gclip = err_of(QuantMethod::kGptqClip);
  EXPECT_LT(gptq, rtn) << "gptq " << gptq << " rtn " << rtn;
  EXPECT_LT(gclip, rtn);
  o.method = QuantMethod::kClipAct;  // needs calibration (second moments), then quantizes
  EXPECT_EQ(quantize_model(m, o, calib).method.rfind("rtn+clip(act)", 0), 0u);
  o.method = QuantMethod::kGptq;
  EXPECT_THROW(quantize_model(m, o, std::span<const int32_t>(calib).first(10)), Error);  // < one window
  // An unknown quantizer cannot reach quantize_model: parsing refuses it, naming the valid ones.
  EXPECT_FUTR_ERROR(parse_quant_method("awq"),
                    "unknown INT4 quantizer 'awq' (choose rtn, clip, clip-act, gptq, gptq-clip)");
}

// The metadata label of each quantizer (what .futr files record per tensor).
TEST(ModelQuant, MethodLabelsInTheMetadata) {
  const ModelConfig c = test::quant_config();
  const Model m = tame_model(c, 5);
  QuantizeOptions o;
  o.format = WeightFormat::kInt4;
  for (QuantMethod q : {QuantMethod::kRtn, QuantMethod::kClip}) {
    o.method = q;
    const quant::QuantizedWeights w = quantize_model(m, o, {});
    EXPECT_EQ(w.at({0, Projection::kQ}).method, quant_method_label(q, false));
  }
  EXPECT_FALSE(needs_calibration(o));
  o.method = QuantMethod::kClipAct;
  EXPECT_TRUE(needs_calibration(o));
  o.act_order = true;  // GPTQ only
  EXPECT_FUTR_ERROR(quantize_model(m, o, {}), "--act-order applies to gptq only");
}

TEST(ModelQuant, Fp8CalibrationRecordsInitialAmax) {
  const ModelConfig c = test::quant_config();
  const Model m = test::random_model(c, 6);
  QuantizeOptions o;
  o.format = WeightFormat::kFp8;
  o.calib_ctx = 32;
  const quant::QuantizedWeights q = quantize_model(m, o, tokens_of(64, c.vocab, 4));
  ASSERT_EQ(q.fp8_initial_amax.size(), size_t(4 * c.n_layers));
  for (const auto& [site, a] : q.fp8_initial_amax) EXPECT_GT(a, 0.0f) << site_name(site);
  EXPECT_TRUE(q.fp8_initial_amax.count(SiteId{1, InputSite::kDownIn}));
}
