// The Llama forward pass, step by step (the math is in forward.h and ops.h).
#include "cpu_engine/forward.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/numeric.h"
#include "cpu_engine/linear.h"

namespace futr::cpu {

Forward::Forward(const Model& model, int ctx)
    : Forward(model, make_weights(model),
              make_fp32_kv_storage(model.config, ctx > 0 ? ctx : model.config.max_context)) {}

Forward::Forward(const Model& model, CpuWeights weights, std::unique_ptr<KvStorage> kv, int max_batch)
    : config_(model.config),
      weights_(std::move(weights)),
      cache_(std::move(kv)),
      rope_(make_rope_table(config_.head_dim, config_.rope_theta, config_.rope_scaling, cache_.capacity())),
      max_batch_(max_batch) {
  FUTR_CHECK(max_batch_ >= 1, "CPU forward: max_batch {} must be positive", max_batch_);
  FUTR_CHECK(int(weights_.layers.size()) == config_.n_layers && weights_.lm_head && weights_.tok_embd,
             "CPU forward: incomplete weights ({} layers for a {}-layer model)", weights_.layers.size(),
             config_.n_layers);
}

Tensor Forward::eval(KvCache& cache, std::span<const int32_t> tokens, int first_logit, bool row_invariant) {
  const int n = int(tokens.size());
  FUTR_CHECK(tokens.size() < size_t(1) << 30, "CPU forward: {} tokens in one call", tokens.size());
  FUTR_CHECK(first_logit >= 0 && first_logit <= n,
             "CPU forward: first logit row {} outside the batch of {} tokens", first_logit, n);
  // Validate everything before touching the cache, so an error changes nothing.
  FUTR_CHECK(cache.capacity() <= rope_.max_pos,
             "CPU forward: a cache of {} positions on a forward pass made for {}", cache.capacity(),
             rope_.max_pos);
  cache.check_room(n);
  for (int i = 0; i < n; ++i)
    FUTR_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < config_.vocab,
               "token id {} at batch position {} is outside the vocabulary (0..{})", tokens[size_t(i)], i,
               config_.vocab - 1);

  Tensor logits({int64_t(n - first_logit), int64_t(config_.vocab)});
  for (int c0 = 0; c0 < n; c0 += max_batch_) {
    const int c1 = std::min(n, c0 + max_batch_);
    // Rows of this chunk that need logits: [max(first_logit, c0), c1).
    const int f = std::max(first_logit, c0);
    float* dst = f < c1 ? logits.row(f - first_logit) : nullptr;
    eval_chunk(cache, tokens.subspan(size_t(c0), size_t(c1 - c0)), f - c0, dst, row_invariant);
  }
  return logits;
}

void Forward::eval_chunk(KvCache& cache, std::span<const int32_t> tokens, int first_logit, float* logits,
                         bool row_invariant) {
  const ModelConfig& c = config_;
  const int n = int(tokens.size());
  const int pos0 = cache.length();
  const int H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
  const size_t nn = size_t(n);
  x_.resize(nn * H);
  xn_.resize(nn * H);
  q_.resize(nn * Q);
  k_.resize(nn * KV);
  v_.resize(nn * KV);
  attn_.resize(nn * Q);
  proj_.resize(nn * H);
  gate_.resize(nn * I);
  up_.resize(nn * I);
  KvStorage& kv = cache.storage();
  std::optional<RowInvariantScope> invariant;  // the GEMMs of every row as alone (eval())
  if (row_invariant && n > 1) invariant.emplace();

  // --- 1. Embedding: x[i] = E[token_i] -------------------------------------------
  embed(weights_.tok_embd, c.vocab, H, tokens, x_.data());
  // The BF16 activations variant (set_bf16_activations): x rounded after every write.
  auto round_all = [](std::vector<float>& v) {
    for (float& f : v) f = round_bf16(f);
  };
  auto round_residual = [&] {
    if (bf16_activations_)
      for (size_t i = 0; i < nn * H; ++i) x_[i] = round_bf16(x_[i]);
  };
  round_residual();

  for (int l = 0; l < c.n_layers; ++l) {
    CpuLayer& L = weights_.layers[size_t(l)];

    // --- 2. Attention block input: xn = RMSNorm(x) * g_attn -----------------------
    rmsnorm(x_.data(), L.attn_norm.data(), xn_.data(), n, H, c.rms_eps);

    // --- 3. Projections: q = xn Wq^T [n, Nh*D], k = xn Wk^T, v = xn Wv^T [n, Nkv*D] (+ biases)
    // (a projection with the RMSNorm folded in reads x itself: Linear::folds_rmsnorm)
    auto normed = [&](const Linear& lin) { return lin.folds_rmsnorm() ? x_.data() : xn_.data(); };
    L.wq->forward(normed(*L.wq), n, q_.data());
    L.wk->forward(normed(*L.wk), n, k_.data());
    L.wv->forward(normed(*L.wv), n, v_.data());
    if (!L.bq.empty()) {  // qwen2: q += bq, k += bk, v += bv (before RoPE)
      for (size_t i = 0; i < nn; ++i) {
        add_inplace(q_.data() + i * size_t(Q), L.bq.data(), Q);
        add_inplace(k_.data() + i * size_t(KV), L.bk.data(), KV);
        add_inplace(v_.data() + i * size_t(KV), L.bv.data(), KV);
      }
    }

    if (bf16_activations_) {  // the BF16 q/k/v of a QKV GEMM's output
      round_all(q_);
      round_all(k_);
      round_all(v_);
    }

    // --- 4. RoPE on q and k at positions pos0 .. pos0+n-1 (v is not rotated) -------
    apply_rope(q_.data(), n, c.n_heads, Q, pos0, rope_);
    apply_rope(k_.data(), n, c.n_kv_heads, KV, pos0, rope_);
    if (bf16_activations_) round_all(q_);

    // --- 5. Append k, v to the cache; read back positions 0 .. pos0+n-1 -----------
    kv.write(l, pos0, n, k_.data(), v_.data());
    const KvLayerView view = kv.read(l, pos0 + n);

    // --- 6. Causal GQA: attn = softmax(q k^T / sqrt(D), causal) v per head ---------
    // (in the storage's attention space: identity for FP32, q H / o H^T if rotated)
    kv.map_query(q_.data(), n, Q);
    if (invariant) {
      // Row by row: each row's keys and GEMM shapes those of a call of its own.
      KvLayerView row_view = view;
      for (int i = 0; i < n; ++i) {
        row_view.len = pos0 + i + 1;
        causal_attention(q_.data() + size_t(i) * Q, Q, 1, pos0 + i, c.n_heads, c.head_dim, row_view,
                         attn_.data() + size_t(i) * Q, Q, scratch_);
      }
    } else {
      causal_attention(q_.data(), Q, n, pos0, c.n_heads, c.head_dim, view, attn_.data(), Q, scratch_);
    }
    kv.unmap_output(attn_.data(), n, Q);

    // --- 7. Output projection and residual: x += attn Wo^T -----------------------
    L.wo->forward(attn_.data(), n, proj_.data());
    add_inplace(x_.data(), proj_.data(), int64_t(nn * H));
    round_residual();

    // --- 8. MLP block input: xn = RMSNorm(x) * g_ffn ------------------------------
    rmsnorm(x_.data(), L.ffn_norm.data(), xn_.data(), n, H, c.rms_eps);

    // --- 9. SwiGLU: u = silu(xn Wgate^T) * (xn Wup^T)   [n, I] ---------------------
    L.w_gate->forward(normed(*L.w_gate), n, gate_.data());
    L.w_up->forward(normed(*L.w_up), n, up_.data());
    swiglu(gate_.data(), up_.data(), gate_.data(), int64_t(nn * I));

    // --- 10. Down projection and residual: x += u Wdown^T -------------------------
    L.w_down->forward(gate_.data(), n, proj_.data());
    add_inplace(x_.data(), proj_.data(), int64_t(nn * H));
    round_residual();
  }
  cache.advance(n);

  // --- 11. Final RMSNorm and LM head, only for the rows that need logits -------------
  // logits[i] = (RMSNorm(x[i]) * g_out) Wlm^T     [rows, vocab]
  if (logits == nullptr || first_logit >= n) return;
  const int rows = n - first_logit;
  rmsnorm(x_.data() + size_t(first_logit) * H, weights_.out_norm.data(), xn_.data(), rows, H, c.rms_eps);
  weights_.lm_head->forward(xn_.data(), rows, logits);
}

}  // namespace futr::cpu
