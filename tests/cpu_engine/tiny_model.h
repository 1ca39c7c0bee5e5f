// Test helpers for the CPU backend: a random-weight Llama model built in
// memory, and a naive reference forward pass written directly from the
// formulas in double precision, with no KV cache, no BLAS and no blocking
// (everything recomputed for every position). The CPU backend must match it.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"

namespace futr::test {

inline Tensor random_tensor(std::vector<int64_t> shape, std::mt19937& rng, float mean, float stddev) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> d(mean, stddev);
  for (auto& v : t.data) v = d(rng);
  return t;
}

// A small Llama with GQA and head_dim != hidden / heads by default.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.name = "tiny";
  c.hidden = 48;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 16;  // q_dim 96 != hidden 48
  c.intermediate = 80;
  c.vocab = 97;
  c.max_context = 256;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = false;
  return c;
}

inline Model random_model(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Model m;
  m.config = c;
  m.path = "random";
  m.format = "test";
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
  const float s = 0.15f;
  m.weights.tok_embd = random_tensor({c.vocab, H}, rng, 0.0f, 1.0f);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = random_tensor({H}, rng, 1.0f, 0.2f);
    L.ffn_norm = random_tensor({H}, rng, 1.0f, 0.2f);
    L.wq = random_tensor({Q, H}, rng, 0.0f, s);
    L.wk = random_tensor({KV, H}, rng, 0.0f, s);
    L.wv = random_tensor({KV, H}, rng, 0.0f, s);
    L.wo = random_tensor({H, Q}, rng, 0.0f, s);
    L.w_gate = random_tensor({I, H}, rng, 0.0f, s);
    L.w_up = random_tensor({I, H}, rng, 0.0f, s);
    L.w_down = random_tensor({H, I}, rng, 0.0f, s);
    if (c.qkv_bias) {  // qwen2: biases large enough to move every logit
      L.bq = random_tensor({Q}, rng, 0.0f, 0.5f);
      L.bk = random_tensor({KV}, rng, 0.0f, 0.5f);
      L.bv = random_tensor({KV}, rng, 0.0f, 0.5f);
    }
    m.weights.layers.push_back(std::move(L));
  }
  m.weights.out_norm = random_tensor({H}, rng, 1.0f, 0.2f);
  if (!c.tied_embeddings) m.weights.lm_head = random_tensor({c.vocab, H}, rng, 0.0f, s);
  return m;
}

// A model whose vocabulary is padded beyond its tokenizer: a tokenizer of
// `tokenizer_size` tokens ("t0", "t1", ...) and config.vocab LM-head rows, the
// padded ones (ids >= tokenizer_size) scaled by `pad_gain` so that their
// logits dominate: an engine that does not mask them samples them.
inline Model padded_vocab_model(ModelConfig c, uint32_t seed, int tokenizer_size, float pad_gain = 60.0f) {
  c.tied_embeddings = false;
  Model m = random_model(c, seed);
  for (int i = 0; i < tokenizer_size; ++i) m.tokenizer.tokens.push_back("t" + std::to_string(i));
  const int64_t H = c.hidden;
  for (int64_t id = tokenizer_size; id < c.vocab; ++id)
    for (int64_t k = 0; k < H; ++k) m.weights.lm_head.data[size_t(id * H + k)] *= pad_gain;
  return m;
}

// --- naive reference, double precision ---------------------------------------

// Inverse RoPE frequencies, written independently of cpu_engine/ops.cpp from the
// definition: f_i = theta^(-2i/D); llama3 blends f and f/factor by wavelength.
inline std::vector<double> naive_inv_freq(const ModelConfig& c) {
  const int D = c.head_dim;
  std::vector<double> f;
  for (int i = 0; i < D; i += 2) f.push_back(1.0 / std::pow(double(c.rope_theta), double(i) / D));
  if (c.rope_scaling.type == "llama3") {
    const auto& r = c.rope_scaling;
    for (auto& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      const double ratio = r.original_max_position / wavelen;  // periods in the original context
      double blend;                                            // 1: keep f, 0: f / factor
      if (ratio > r.high_freq_factor) blend = 1;
      else if (ratio < r.low_freq_factor) blend = 0;
      else blend = (ratio - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      x = blend * x + (1 - blend) * x / r.factor;
    }
  }
  return f;
}

inline std::vector<double> naive_matvec(const Tensor& W, const std::vector<double>& x) {
  const int64_t N = W.dim(0), K = W.dim(1);
  std::vector<double> y(size_t(N), 0.0);
  for (int64_t o = 0; o < N; ++o)
    for (int64_t k = 0; k < K; ++k) y[size_t(o)] += double(W.data[size_t(o * K + k)]) * x[size_t(k)];
  return y;
}

inline std::vector<double> naive_rmsnorm(const std::vector<double>& x, const Tensor& g, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t j = 0; j < x.size(); ++j) y[j] = x[j] * r * double(g.data[j]);
  return y;
}

// Rotate-half RoPE of one head vector at position p.
inline void naive_rope(double* v, int D, int p, const std::vector<double>& f) {
  for (int i = 0; i < D / 2; ++i) {
    const double a = v[i], b = v[i + D / 2];
    const double c = std::cos(p * f[size_t(i)]), s = std::sin(p * f[size_t(i)]);
    v[i] = a * c - b * s;
    v[i + D / 2] = b * c + a * s;
  }
}

// Logits [T, vocab] (row-major) for the token sequence, positions 0..T-1.
inline std::vector<double> naive_forward(const Model& m, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = m.config;
  const int T = int(tokens.size()), H = c.hidden, D = c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const auto f = naive_inv_freq(c);
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < H; ++j)
      x[size_t(t)].push_back(m.weights.tok_embd.data[size_t(tokens[size_t(t)]) * H + j]);
  for (const LayerWeights& L : m.weights.layers) {
    const size_t nT = static_cast<size_t>(T);
    std::vector<std::vector<double>> q(nT), k(nT), v(nT);
    for (int t = 0; t < T; ++t) {
      const auto a = naive_rmsnorm(x[size_t(t)], L.attn_norm, c.rms_eps);
      q[size_t(t)] = naive_matvec(L.wq, a);
      k[size_t(t)] = naive_matvec(L.wk, a);
      v[size_t(t)] = naive_matvec(L.wv, a);
      for (size_t i = 0; i < L.bq.data.size(); ++i) q[size_t(t)][i] += L.bq.data[i];  // qwen2 biases
      for (size_t i = 0; i < L.bk.data.size(); ++i) k[size_t(t)][i] += L.bk.data[i];
      for (size_t i = 0; i < L.bv.data.size(); ++i) v[size_t(t)][i] += L.bv.data[i];
      for (int h = 0; h < c.n_heads; ++h) naive_rope(&q[size_t(t)][size_t(h * D)], D, t, f);
      for (int h = 0; h < c.n_kv_heads; ++h) naive_rope(&k[size_t(t)][size_t(h * D)], D, t, f);
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> o(size_t(c.q_dim()), 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / group;
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < D; ++i) d += q[size_t(t)][size_t(h * D + i)] * k[size_t(u)][size_t(g * D + i)];
          s[size_t(u)] = d / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(u)]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < D; ++i)
            o[size_t(h * D + i)] += s[size_t(u)] / sum * v[size_t(u)][size_t(g * D + i)];
      }
      const auto po = naive_matvec(L.wo, o);
      for (int j = 0; j < H; ++j) x[size_t(t)][size_t(j)] += po[size_t(j)];
      const auto mm = naive_rmsnorm(x[size_t(t)], L.ffn_norm, c.rms_eps);
      auto gt = naive_matvec(L.w_gate, mm);
      const auto up = naive_matvec(L.w_up, mm);
      for (size_t i = 0; i < gt.size(); ++i) gt[i] = gt[i] / (1 + std::exp(-gt[i])) * up[i];
      const auto pd = naive_matvec(L.w_down, gt);
      for (int j = 0; j < H; ++j) x[size_t(t)][size_t(j)] += pd[size_t(j)];
    }
  }
  std::vector<double> logits;
  for (int t = 0; t < T; ++t) {
    const auto y = naive_rmsnorm(x[size_t(t)], m.weights.out_norm, c.rms_eps);
    const auto z = naive_matvec(m.weights.output(), y);
    logits.insert(logits.end(), z.begin(), z.end());
  }
  return logits;
}

}  // namespace futr::test
