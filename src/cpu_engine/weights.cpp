// Builds CpuWeights from a Model (see weights.h).
#include "cpu_engine/weights.h"

#include <fmt/format.h>

#include "core/error.h"

namespace futr::cpu {

namespace {

void expect_shape(const Tensor& t, const std::vector<int64_t>& shape, const std::string& name) {
  Tensor want;
  want.shape = shape;
  FUTR_CHECK(t.shape == shape, "model tensor '{}' has shape {}, expected {}", name, t.shape_str(),
             want.shape_str());
  FUTR_CHECK(int64_t(t.data.size()) == t.numel(), "model tensor '{}' {} holds {} values", name, t.shape_str(),
             t.data.size());
}

std::unique_ptr<Linear> build(const LinearFactory& factory, ProjId id, const Tensor& w) {
  const std::string name = projection_name(id);
  std::unique_ptr<Linear> l = factory(id, w);
  FUTR_CHECK(l != nullptr, "linear factory returned nothing for '{}'", name);
  FUTR_CHECK(l->out_features() == w.dim(0) && l->in_features() == w.dim(1),
             "linear factory built '{}' as [{}, {}] for weight {}", name, l->out_features(), l->in_features(),
             w.shape_str());
  return l;
}

}  // namespace

std::unique_ptr<Linear> dense_linear(ProjId id, const Tensor& weight) {
  return DenseLinear::borrow(weight, projection_name(id));
}

CpuWeights make_weights(const Model& model, const LinearFactory& factory) {
  const ModelConfig& c = model.config;
  c.validate(model.path.empty() ? std::string("model") : model.path);
  const ModelWeights& w = model.weights;
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, V = c.vocab;
  FUTR_CHECK(int(w.layers.size()) == c.n_layers, "model has {} layers of weights, config says {}",
             w.layers.size(), c.n_layers);

  CpuWeights out;
  expect_shape(w.tok_embd, {V, H}, "token_embd");
  out.tok_embd = w.tok_embd.ptr();
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    const std::string p = fmt::format("blk.{}.", l);
    expect_shape(lw.attn_norm, {H}, p + "attn_norm");
    expect_shape(lw.ffn_norm, {H}, p + "ffn_norm");
    expect_shape(lw.wq, {Q, H}, p + "attn_q");
    expect_shape(lw.wk, {KV, H}, p + "attn_k");
    expect_shape(lw.wv, {KV, H}, p + "attn_v");
    expect_shape(lw.wo, {H, Q}, p + "attn_output");
    expect_shape(lw.w_gate, {I, H}, p + "ffn_gate");
    expect_shape(lw.w_up, {I, H}, p + "ffn_up");
    expect_shape(lw.w_down, {H, I}, p + "ffn_down");
    CpuLayer L;
    L.attn_norm = lw.attn_norm.data;
    L.ffn_norm = lw.ffn_norm.data;
    L.wq = build(factory, {l, Projection::kQ}, lw.wq);
    L.wk = build(factory, {l, Projection::kK}, lw.wk);
    L.wv = build(factory, {l, Projection::kV}, lw.wv);
    if (c.qkv_bias) {  // kept in FP32 by every weight format (they are a few thousand values)
      expect_shape(lw.bq, {Q}, p + "attn_q.bias");
      expect_shape(lw.bk, {KV}, p + "attn_k.bias");
      expect_shape(lw.bv, {KV}, p + "attn_v.bias");
      L.bq = lw.bq.data;
      L.bk = lw.bk.data;
      L.bv = lw.bv.data;
    } else {
      FUTR_CHECK(lw.bq.empty() && lw.bk.empty() && lw.bv.empty(),
                 "model has q/k/v biases but architecture {}", c.arch);
    }
    L.wo = build(factory, {l, Projection::kO}, lw.wo);
    L.w_gate = build(factory, {l, Projection::kGate}, lw.w_gate);
    L.w_up = build(factory, {l, Projection::kUp}, lw.w_up);
    L.w_down = build(factory, {l, Projection::kDown}, lw.w_down);
    out.layers.push_back(std::move(L));
  }
  expect_shape(w.out_norm, {H}, "output_norm");
  out.out_norm = w.out_norm.data;
  if (!c.tied_embeddings) {
    FUTR_CHECK(!w.lm_head.empty(), "model has untied embeddings but no output (LM head) tensor");
  }
  expect_shape(w.output(), {V, H}, w.lm_head.empty() ? "token_embd (tied LM head)" : "output");
  out.lm_head = build(factory, ProjId{}, w.output());
  return out;
}

}  // namespace futr::cpu
