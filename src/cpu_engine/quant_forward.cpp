// The quantized reference model (see quant_forward.h).
#include "cpu_engine/quant_forward.h"

#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/numeric.h"
#include "cpu_engine/quant_linear.h"

namespace futr::cpu {

std::vector<float> bf16_copy(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  round_bf16_into(v.data(), int64_t(v.size()), out.data());
  return out;
}

LinearFactory quant_linear_factory(const Model& model, WeightFormat format,
                                   std::shared_ptr<const quant::QuantizedWeights> q,
                                   std::shared_ptr<quant::ScaleBank> bank, bool fp8_rms_in_cast,
                                   bool fp8_gpu_numerics) {
  FUTR_CHECK(format == WeightFormat::kBf16 || q, "the {} reference needs quantized weights",
             to_string(format));
  FUTR_CHECK(!q || format == WeightFormat::kBf16 || q->format == format, "quantized weights are {}, not {}",
             to_string(q ? q->format : format), to_string(format));
  auto sites = std::make_shared<std::map<int, std::shared_ptr<Fp8Site>>>();
  const float eps = model.config.rms_eps;
  return [format, q, bank, sites, eps, fp8_rms_in_cast, fp8_gpu_numerics](
             ProjId id, const Tensor& w) -> std::unique_ptr<Linear> {
    const int64_t n = w.dim(0), k = w.dim(1);
    const std::string name = projection_name(id);
    if (id.proj == Projection::kLmHead) return std::make_unique<Bf16Linear>(w.ptr(), n, k, false, name);
    if (format == WeightFormat::kBf16) {
      if (!q) return std::make_unique<Bf16Linear>(w.ptr(), n, k, true, name);
      const quant::QuantizedTensor& t = q->at(id);  // stored BF16 (a .futr file)
      FUTR_CHECK(t.n == n && t.k == k && t.bf16.size() == size_t(n * k),
                 "BF16 tensor '{}' does not match the model's [{}, {}]", name, n, k);
      std::vector<float> f(t.bf16.size());
      for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_float(t.bf16[i]);
      return std::make_unique<Bf16Linear>(f.data(), n, k, true, name);
    }
    const quant::QuantizedTensor& t = q->at(id);
    FUTR_CHECK(t.n == n && t.k == k && t.format == format,
               "quantized tensor '{}' is {} [{}, {}], the model needs {} [{}, {}]", name, to_string(t.format),
               t.n, t.k, to_string(format), n, k);
    if (format == WeightFormat::kInt4) return std::make_unique<Int4Linear>(t.int4, name);
    FUTR_CHECK(bank != nullptr, "FP8 reference without a scale bank");
    const bool owner = records_site(id.proj);
    const int site = kInputSites * id.layer + int(input_site(id.proj));
    auto& s = (*sites)[site];
    if (!s) {
      s = std::make_shared<Fp8Site>();
      s->bank = bank;
      s->id = site;
    }
    const bool want_folded = reads_rmsnorm(id.proj);
    FUTR_CHECK(t.fp8.folded_gain == want_folded, "FP8 tensor '{}': the RMSNorm gain is {}folded", name,
               t.fp8.folded_gain ? "" : "not ");
    // The GPU's SwiGLU epilogue casts its FP32 output: no BF16 rounding of the down input there.
    const bool round_input = !(fp8_gpu_numerics && id.proj == Projection::kDown);
    return std::make_unique<Fp8Linear>(t.fp8, s, owner, eps, name, fp8_rms_in_cast, round_input);
  };
}

QuantForward::QuantForward(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                           const QuantRunOptions& o, int ctx, std::unique_ptr<KvStorage> kv)
    : opt_(o), q_(std::move(q)) {
  const ModelConfig& c = model.config;
  if (ctx <= 0) ctx = c.max_context;
  if (!kv) kv = make_kv_storage(c, ctx, o.kv, o.kv_block);
  if (o.weights == WeightFormat::kFp32) {
    fwd_ = std::make_unique<Forward>(model, make_weights(model), std::move(kv), o.max_batch);
    return;
  }
  if (o.weights == WeightFormat::kFp8) {
    bank_ = std::make_shared<quant::ScaleBank>(o.fp8);
    // Site ids in the bank: kInputSites * layer + InputSite, in order.
    for (int l = 0; l < c.n_layers; ++l)
      for (int si = 0; si < kInputSites; ++si) {
        const SiteId site{l, InputSite(si)};
        const int id = bank_->add_site(site_name(site));
        FUTR_ASSERT(id == kInputSites * l + si);
        if (o.fp8_rms_in_cast && (site.site == InputSite::kAttnIn || site.site == InputSite::kFfnIn)) {
          // Normalized rows are cast: their bound, not the calibration of x (delayed_scaling.h).
          bank_->set_initial_amax(id, quant::normalized_rows_amax_bound(c.hidden));
        } else if (q_) {
          auto it = q_->fp8_initial_amax.find(site);
          if (it != q_->fp8_initial_amax.end()) bank_->set_initial_amax(id, it->second);
        }
      }
  }
  CpuWeights w = make_weights(
      model, quant_linear_factory(model, o.weights, q_, bank_, o.fp8_rms_in_cast, o.fp8_gpu_numerics));
  // Embedding, norm gains: BF16 in every quantized mode.
  embd_.resize(model.weights.tok_embd.data.size());
  round_bf16_into(model.weights.tok_embd.ptr(), int64_t(embd_.size()), embd_.data());
  w.tok_embd = embd_.data();
  for (CpuLayer& L : w.layers) {
    L.attn_norm = bf16_copy(L.attn_norm);
    L.ffn_norm = bf16_copy(L.ffn_norm);
  }
  w.out_norm = bf16_copy(w.out_norm);
  fwd_ = std::make_unique<Forward>(model, std::move(w), std::move(kv), o.max_batch);
  fwd_->set_bf16_activations(o.fp8_gpu_numerics);
}

std::string QuantForward::describe() const {
  std::string s = fmt::format("weights {}", to_string(opt_.weights));
  if (q_ && opt_.weights != WeightFormat::kBf16 && opt_.weights != WeightFormat::kFp32)
    s += fmt::format(" ({})", q_->method);
  s += fmt::format(", KV {}", fwd_->cache().storage().name());
  if (bank_) {
    // The counters (calls, saturations) are engine state: CpuEngine::stats().
    const quant::ScaleBank& b = *bank_;
    if (b.config().scaling == Fp8Scaling::kStatic)
      s += fmt::format(", FP8 static scales (margin {}){}", b.config().margin,
                       opt_.fp8_rms_in_cast ? ", 1/rms in the cast" : "");
    else
      s += fmt::format(", FP8 delayed scaling: history {}, margin {}{}", b.config().history,
                       b.config().margin, opt_.fp8_rms_in_cast ? ", 1/rms in the cast" : "");
    if (opt_.fp8_gpu_numerics) s += ", the GPU prefill's roundings (BF16 residual and q/k/v)";
  }
  return s;
}

}  // namespace futr::cpu
