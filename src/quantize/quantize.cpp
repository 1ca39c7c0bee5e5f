// The calibration and quantization pipeline (see quantize.h): RTN, clipping,
// GPTQ with layer-by-layer calibration through the CPU forward, FP8.
#include "quantize/quantize.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/numeric.h"
#include "cpu_engine/quant_forward.h"
#include "cpu_engine/threads.h"
#include "quant/delayed_scaling.h"
#include "quant/fp8_weights.h"
#include "quant/int4_quant.h"

namespace futr::cpu {

namespace {

// A Linear that must never run (the LM head of the calibration passes).
class NullLinear final : public Linear {
 public:
  NullLinear(int64_t n, int64_t k) : n_(n), k_(k) {}
  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  std::string describe() const override { return "none"; }
  void forward(const float*, int64_t, float*) override { FUTR_ASSERT(false); }

 private:
  int64_t n_, k_;
};

// H += X^T X of every input batch (double accumulator).
struct HessianAcc {
  int k = 0;
  int64_t rows = 0;
  std::vector<double> h;  // [k, k]
  std::vector<float> xt, part;
  void add(const float* x, int64_t m) {
    xt.resize(size_t(k) * size_t(m));
    part.resize(size_t(k) * size_t(k));
    for (int64_t r = 0; r < m; ++r)
      for (int j = 0; j < k; ++j)
        xt[size_t(j) * size_t(m) + size_t(r)] = x[size_t(r) * size_t(k) + size_t(j)];
    gemm_xwt(xt.data(), k, xt.data(), k, m, part.data());  // part = X^T X
    for (size_t i = 0; i < h.size(); ++i) h[i] += double(part[i]);
    rows += m;
  }
};

// Runs `inner`; records its inputs into a Hessian (pass 1) or its outputs (pass 2).
class CaptureLinear final : public Linear {
 public:
  CaptureLinear(std::unique_ptr<Linear> inner, HessianAcc* hess, std::vector<float>* outputs)
      : inner_(std::move(inner)), hess_(hess), out_(outputs) {}
  int64_t in_features() const override { return inner_->in_features(); }
  int64_t out_features() const override { return inner_->out_features(); }
  std::string describe() const override { return "capture " + inner_->describe(); }
  void forward(const float* x, int64_t m, float* y) override {
    inner_->forward(x, m, y);
    if (hess_) hess_->add(x, m);
    if (out_) out_->insert(out_->end(), y, y + m * out_features());
  }

 private:
  std::unique_ptr<Linear> inner_;
  HessianAcc* hess_;
  std::vector<float>* out_;
};

std::string int4_method_name(const QuantizeOptions& o) { return quant_method_label(o.method, o.act_order); }

quant::QuantizedTensor int4_tensor(ProjId id, quant::Int4Weights w, const std::string& method) {
  quant::QuantizedTensor t;
  t.id = id;
  t.format = WeightFormat::kInt4;
  t.n = w.n;
  t.k = w.k;
  t.method = method;
  t.int4 = std::move(w);
  return t;
}

// Per-input second moments E[x_k^2] of every projection's input on the calibration
// windows (one FP32 forward pass): the weights of the activation-aware clipping search.
class DiagLinear final : public Linear {
 public:
  DiagLinear(std::unique_ptr<Linear> inner, std::vector<double>* acc, int64_t* rows)
      : inner_(std::move(inner)), acc_(acc), rows_(rows) {}
  int64_t in_features() const override { return inner_->in_features(); }
  int64_t out_features() const override { return inner_->out_features(); }
  std::string describe() const override { return inner_->describe(); }
  void forward(const float* x, int64_t m, float* y) override {
    inner_->forward(x, m, y);
    const int64_t k = in_features();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) (*acc_)[size_t(j)] += double(x[r * k + j]) * x[r * k + j];
    *rows_ += m;
  }

 private:
  std::unique_ptr<Linear> inner_;
  std::vector<double>* acc_;
  int64_t* rows_;
};

std::map<ProjId, std::vector<float>> input_second_moments(const Model& model, const QuantizeOptions& o,
                                                          std::span<const int32_t> calib,
                                                          const QuantProgress& progress) {
  const int ctx = o.calib_ctx;
  const int windows = int(calib.size() / size_t(std::max(ctx, 1)));
  FUTR_CHECK(ctx >= 2 && windows >= 1,
             "clip-act needs at least one calibration window of {} tokens ({} given)", ctx, calib.size());
  std::map<ProjId, std::vector<double>> acc;
  std::map<ProjId, int64_t> rows;
  Forward f(model,
            make_weights(model,
                         [&](ProjId id, const Tensor& w) -> std::unique_ptr<Linear> {
                           if (id.proj == Projection::kLmHead)
                             return std::make_unique<NullLinear>(w.dim(0), w.dim(1));
                           acc[id].assign(size_t(w.dim(1)), 0.0);
                           return std::make_unique<DiagLinear>(DenseLinear::borrow(w, projection_name(id)),
                                                               &acc[id], &rows[id]);
                         }),
            make_fp32_kv_storage(model.config, ctx));
  for (int w = 0; w < windows; ++w) {
    if (progress) progress("calibration", w, windows);
    f.reset();
    f.eval(calib.subspan(size_t(w) * size_t(ctx), size_t(ctx)), ctx);  // no logits
  }
  if (progress) progress("calibration", windows, windows);
  std::map<ProjId, std::vector<float>> out;
  for (auto& [id, a] : acc) {
    std::vector<float>& d = out[id];
    for (double v : a) d.push_back(float(v / double(std::max<int64_t>(rows[id], 1))));
  }
  return out;
}

// GPTQ over the whole model, layer by layer through the quantized prefix.
void gptq_model(const Model& model, const QuantizeOptions& o, std::span<const int32_t> calib,
                quant::QuantizedWeights& out, const QuantProgress& progress) {
  const ModelConfig& c = model.config;
  const int ctx = o.calib_ctx;
  FUTR_CHECK(ctx >= 2, "calibration context {} is too short", ctx);
  const int windows = int(calib.size() / size_t(ctx));
  FUTR_CHECK(windows >= 1, "GPTQ needs at least one calibration window of {} tokens ({} given)", ctx,
             calib.size());
  const int64_t ntok = int64_t(windows) * ctx;
  const int H = c.hidden;
  for (int64_t i = 0; i < ntok; ++i)
    FUTR_CHECK(calib[size_t(i)] >= 0 && calib[size_t(i)] < c.vocab, "calibration token {} out of range",
               calib[size_t(i)]);

  // h_0: embedding rows (FP32).
  Tensor hidden({ntok, int64_t(H)});
  for (int64_t i = 0; i < ntok; ++i)
    std::copy_n(model.weights.tok_embd.row(calib[size_t(i)]), H, hidden.row(i));

  quant::GptqOptions go;
  go.group = o.group;
  go.damp = o.damp;
  go.act_order = o.act_order;
  go.clip = o.clip;
  go.clip.enabled = o.method == QuantMethod::kGptqClip;
  const std::string method = int4_method_name(o);

  for (int l = 0; l < c.n_layers; ++l) {
    if (progress) progress("gptq", l, c.n_layers);
    // One-layer model whose embedding table is h_l; tokens are row indices.
    Model m1;
    m1.config = c;
    m1.config.n_layers = 1;
    m1.config.vocab = int(ntok);
    m1.config.tied_embeddings = true;
    m1.config.max_context = std::max(c.max_context, ctx);
    m1.path = "calibration";
    m1.weights.tok_embd = std::move(hidden);
    m1.weights.layers.push_back(model.weights.layers[size_t(l)]);
    m1.weights.out_norm = model.weights.out_norm;

    auto run = [&](const LinearFactory& factory) {
      Forward f(m1, make_weights(m1, factory), make_fp32_kv_storage(m1.config, ctx));
      std::vector<int32_t> ids(static_cast<size_t>(ctx));
      for (int w = 0; w < windows; ++w) {
        for (int i = 0; i < ctx; ++i) ids[size_t(i)] = w * ctx + i;
        f.reset();
        f.eval(ids, ctx);  // no logits
      }
    };

    // Hessians of the four inputs and GPTQ of the projections reading each. With
    // true_sequential (the default) they come one input at a time, each pass running the
    // layer with the projections of the earlier inputs already quantized (q/k/v, then o,
    // then gate/up, then down); otherwise one pass with FP32 weights collects all four.
    std::vector<HessianAcc> hess(4);
    for (int s = 0; s < 4; ++s) {
      hess[size_t(s)].k = s == 3 ? c.intermediate : (s == 1 ? c.q_dim() : H);
      hess[size_t(s)].h.assign(size_t(hess[size_t(s)].k) * size_t(hess[size_t(s)].k), 0.0);
    }
    std::map<Projection, Tensor> deq;  // dequantized [n, k], by projection (m1's one layer is 0)
    auto capture = [&](int site) {     // site < 0: all four
      run([&](ProjId id, const Tensor& w) -> std::unique_ptr<Linear> {
        if (id.proj == Projection::kLmHead) return std::make_unique<NullLinear>(w.dim(0), w.dim(1));
        const int s = int(input_site(id.proj));
        const auto it = deq.find(id.proj);
        std::unique_ptr<Linear> inner =
            DenseLinear::borrow(it != deq.end() ? it->second : w, projection_name(id));
        HessianAcc* h = records_site(id.proj) && (site < 0 || site == s) ? &hess[size_t(s)] : nullptr;
        return std::make_unique<CaptureLinear>(std::move(inner), h, nullptr);
      });
    };
    auto quantize_site = [&](int site) {
      for (Projection p : kLayerProjections) {
        if (int(input_site(p)) != site) continue;
        const ProjId id{l, p};
        const std::string name = projection_name(id);
        const Tensor& w = projection_weight(model, id);
        const HessianAcc& h = hess[size_t(site)];
        FUTR_ASSERT(h.k == int(w.dim(1)) && h.rows > 0);
        std::vector<double> hn(h.h.size());
        for (size_t i = 0; i < hn.size(); ++i) hn[i] = h.h[i] / double(h.rows);
        quant::Int4Weights q = quant::gptq_quantize(w.data, int(w.dim(0)), int(w.dim(1)), hn, go, name);
        Tensor d({w.dim(0), w.dim(1)});
        d.data = quant::dequantize_int4(q);
        deq.insert_or_assign(p, std::move(d));
        out.tensors[id] = int4_tensor(id, std::move(q), method);
      }
    };
    if (o.true_sequential) {
      for (int site = 0; site < 4; ++site) {
        capture(site);
        quantize_site(site);
      }
    } else {
      capture(-1);
      for (int site = 0; site < 4; ++site) quantize_site(site);
    }

    // Pass 2: layer l quantized; h_{l+1} = (h_l + o) + d, as the forward pass adds.
    std::vector<float> o_out, d_out;
    o_out.reserve(size_t(ntok) * size_t(H));
    d_out.reserve(size_t(ntok) * size_t(H));
    run([&](ProjId id, const Tensor& w) -> std::unique_ptr<Linear> {
      if (id.proj == Projection::kLmHead) return std::make_unique<NullLinear>(w.dim(0), w.dim(1));
      std::vector<float>* rec = id.proj == Projection::kO      ? &o_out
                                : id.proj == Projection::kDown ? &d_out
                                                               : nullptr;
      return std::make_unique<CaptureLinear>(DenseLinear::borrow(deq.at(id.proj), projection_name(id)),
                                             nullptr, rec);
    });
    FUTR_ASSERT(o_out.size() == size_t(ntok) * size_t(H) && d_out.size() == o_out.size());
    hidden = std::move(m1.weights.tok_embd);
    for (size_t i = 0; i < o_out.size(); ++i) {
      float x = hidden.data[i];
      x += o_out[i];
      x += d_out[i];
      hidden.data[i] = x;
    }
  }
  if (progress) progress("gptq", c.n_layers, c.n_layers);
}

}  // namespace

bool needs_calibration(const QuantizeOptions& o) {
  if (o.format == WeightFormat::kFp8) return true;
  return o.format == WeightFormat::kInt4 && needs_activations(o.method);
}

quant::QuantizedWeights quantize_model(const Model& model, const QuantizeOptions& o,
                                       std::span<const int32_t> calib, const QuantProgress& progress) {
  const ModelConfig& c = model.config;
  ensure_single_threaded_blas();
  quant::QuantizedWeights out;
  out.format = o.format;
  FUTR_CHECK(o.format != WeightFormat::kFp32 && o.format != WeightFormat::kAuto,
             "quantize: {} is not a quantized format", to_string(o.format));
  if (o.format == WeightFormat::kInt4) {
    FUTR_CHECK(!o.act_order || is_gptq(o.method), "--act-order applies to gptq only");
    FUTR_CHECK(o.group == 0 || o.group == 64 || o.group == 128, "INT4 group {} (choose 64 or 128)", o.group);
  }
  const int layers = c.n_layers;
  const int64_t steps = int64_t(layers) * 7;

  std::map<ProjId, std::vector<float>> act_diag;  // clip-act: E[x_k^2] per projection input
  if (o.format == WeightFormat::kInt4 && o.method == QuantMethod::kClipAct)
    act_diag = input_second_moments(model, o, calib, progress);
  if (o.format == WeightFormat::kInt4 && is_gptq(o.method)) {
    gptq_model(model, o, calib, out, progress);
  } else {
    int64_t done = 0;
    for (int l = 0; l < layers; ++l) {
      for (Projection p : kLayerProjections) {
        if (progress) progress(to_string(o.format), done, steps);
        const ProjId id{l, p};
        const std::string name = projection_name(id);
        const Tensor& w = projection_weight(model, id);
        const int n = int(w.dim(0)), k = int(w.dim(1));
        quant::QuantizedTensor t;
        t.id = id;
        t.format = o.format;
        t.n = n;
        t.k = k;
        if (o.format == WeightFormat::kBf16) {
          t.method = "bf16";
          t.bf16.resize(w.data.size());
          for (size_t i = 0; i < w.data.size(); ++i) t.bf16[i] = float_to_bf16(w.data[i]);
        } else if (o.format == WeightFormat::kFp8) {
          t.method = "fp8-channel";
          const Tensor* g = rmsnorm_gain(model, id);
          if (g) {
            const std::vector<float> gain = bf16_copy(g->data);  // gains are BF16 in every quantized mode
            t.fp8 = quant::quantize_fp8(quant::fold_gain(w.data, n, k, gain), n, k, true, name);
          } else {
            t.fp8 = quant::quantize_fp8(w.data, n, k, false, name);
          }
        } else {
          quant::ClipSearch clip = o.clip;
          clip.enabled = o.method == QuantMethod::kClip || o.method == QuantMethod::kClipAct;
          const std::vector<float>* diag = act_diag.empty() ? nullptr : &act_diag.at(id);
          t = int4_tensor(
              id,
              quant::quantize_int4(w.data, n, k, o.group, clip,
                                   diag ? std::span<const float>(*diag) : std::span<const float>(), name),
              int4_method_name(o));
        }
        out.tensors[id] = std::move(t);
        ++done;
      }
    }
    if (progress) progress(to_string(o.format), steps, steps);
  }

  // Method summary.
  if (o.format == WeightFormat::kInt4) {
    const int g_h = o.group ? o.group : quant::int4_group_for(c.hidden, "hidden");
    const int g_i = o.group ? o.group : quant::int4_group_for(c.intermediate, "intermediate");
    out.method = fmt::format("{} g{}/{}", int4_method_name(o), g_h, g_i);
  } else {
    out.method = o.format == WeightFormat::kFp8 ? "fp8-channel (rmsnorm folded)" : "bf16";
  }

  // FP8: the initial delayed-scaling amax per site from the calibration text.
  if (o.format == WeightFormat::kFp8 && !calib.empty()) {
    auto q = std::make_shared<quant::QuantizedWeights>(out);
    QuantRunOptions ro;
    ro.weights = WeightFormat::kFp8;
    const int ctx = std::min<int>(o.calib_ctx, int(calib.size()));
    QuantForward qf(model, q, ro, ctx);
    const size_t use = std::min(calib.size(), size_t(ctx) * 4);  // up to 4 windows
    for (size_t b = 0; b + size_t(ctx) <= use; b += size_t(ctx)) {
      if (progress) progress("fp8 calibration", int64_t(b), int64_t(use));
      qf.forward().reset();
      qf.forward().eval(calib.subspan(b, size_t(ctx)), ctx);
    }
    if (progress) progress("fp8 calibration", int64_t(use), int64_t(use));
    const quant::ScaleBank& bank = *qf.fp8_bank();
    for (int s = 0; s < bank.sites(); ++s) {
      const quant::DelayedScale* st = bank.find(0, s);
      // The calibration maximum itself: headroom is costly here (sites with massive
      // activations have no spare dynamic range, docs/QUANTIZATION.md).
      // Bank ids are kInputSites * layer + site (cpu_engine/quant_forward.h).
      // A site outside what a .futr may carry (no signal, or beyond any real
      // activation) keeps the engine's default initial amax.
      if (st && st->stats().max_amax >= quant::kFp8MinCalibratedAmax &&
          st->stats().max_amax <= quant::kFp8MaxCalibratedAmax)
        out.fp8_initial_amax[SiteId{s / kInputSites, InputSite(s % kInputSites)}] = st->stats().max_amax;
    }
  }
  return out;
}

}  // namespace futr::cpu
