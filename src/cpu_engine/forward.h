// The Llama forward pass of the CPU reference backend, FP32.
//
// For the tokens x_0..x_{n-1} at positions p = P..P+n-1 (P = tokens already
// in the KV cache), with hidden size H, head_dim D, heads Nh, KV heads Nkv:
//
//   h = E[x]                                     embedding            [n, H]
//   for each layer:
//     a = RMSNorm(h; g_attn)
//     q = a Wq^T, k = a Wk^T, v = a Wv^T         [n, Nh*D], [n, Nkv*D] x2
//       (+ bq, bk, bv for qwen2)
//     q, k = RoPE(q, p), RoPE(k, p)              rotate-half pairing
//     cache[p] = (k, v)
//     o = CausalGQA(q, cache[0..p])              softmax(q k^T / sqrt(D)) v
//     h = h + o Wo^T
//     m = RMSNorm(h; g_ffn)
//     h = h + (silu(m Wgate^T) * (m Wup^T)) Wdown^T
//   logits = RMSNorm(h; g_out) Wlm^T             [n, vocab] (Wlm = E if tied)
//
// Each step is one function of cpu_engine/ops.h or one Linear (cpu_engine/linear.h); the
// KV cache is cpu_engine/kv_cache.h. Prompt processing runs many tokens per call
// (GEMMs through cblas_sgemm, split internally into chunks of max_batch
// tokens to bound activation memory); decode calls eval() with one token.
// Both go through the same code, so prefill and decode agree up to the
// summation order inside BLAS (tests/cpu_engine/forward_test.cpp).
//
// Sequences: a Forward owns one KV cache (eval(tokens, ...)) and can run
// other caches of the same storage kind and capacity (eval(cache, tokens,
// ...)): the weights, the RoPE table and the activation buffers are shared,
// each sequence's K/V live in its own cache (the CPU engines of cpu_engine/engine.h
// hold one cache per open sequence). A call's result depends only on the
// cache it runs on and its tokens, never on other caches.
//
// Threads: OpenBLAS threads for GEMMs, OpenMP for the rest (cpu_engine/threads.h).
// Not thread-safe: one call at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "cpu_engine/kv_cache.h"
#include "cpu_engine/ops.h"
#include "cpu_engine/weights.h"
#include "model/model.h"

namespace futr::cpu {

class Forward {
 public:
  // FP32 weights borrowed from `model` and an FP32 KV cache of `ctx`
  // positions (ctx <= 0: the model's trained context).
  Forward(const Model& model, int ctx);
  // Any weights and KV storage (the seam for the quantized reference). The
  // context length is kv->capacity(). `model` must outlive this object.
  Forward(const Model& model, CpuWeights weights, std::unique_ptr<KvStorage> kv, int max_batch = 256);

  // Runs `tokens` at positions [position(), position() + n), stores their
  // K/V in the cache, and returns the logits of the batch rows
  // [first_logit, n) as a Tensor [n - first_logit, vocab] (empty when
  // first_logit == n). Throws futr::Error (and changes nothing) when the
  // tokens do not fit in the context or an id is outside the vocabulary.
  Tensor eval(std::span<const int32_t> tokens, int first_logit) { return eval(cache_, tokens, first_logit); }
  // The same on another sequence's cache (capacity at most capacity()).
  // row_invariant: every row gets the bits it would get in a call of its own
  // (the GEMMs through RowInvariantScope, attention row by row): the decode
  // rows of a step (speculative decoding's drafts), not prompts.
  Tensor eval(KvCache& cache, std::span<const int32_t> tokens, int first_logit, bool row_invariant = false);
  // Logits for every position: [n, vocab] (perplexity).
  Tensor eval_all(std::span<const int32_t> tokens) { return eval(tokens, 0); }
  // Logits for the last position only: [1, vocab] (generation).
  Tensor eval_last(std::span<const int32_t> tokens) { return eval(tokens, int(tokens.size()) - 1); }

  int position() const { return cache_.length(); }  // tokens in the cache
  int capacity() const { return cache_.capacity(); }
  void reset() { cache_.clear(); }  // start a new sequence
  void truncate(int len) { cache_.truncate(len); }
  const ModelConfig& config() const { return config_; }
  const CpuWeights& weights() const { return weights_; }
  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }
  // The GPU prefill path's BF16 activations: the residual stream x rounded
  // after the embedding and every residual add (its O / down epilogues store
  // bf16(x + y)), q/k/v after their projections (its QKV GEMM stores BF16) and
  // q after RoPE (its attention reads BF16 q); off: FP32 (the default).
  void set_bf16_activations(bool on) { bf16_activations_ = on; }
  bool bf16_activations() const { return bf16_activations_; }

 private:
  // One chunk of at most max_batch_ tokens; logits rows [first_logit, n)
  // go to `logits` (row-major, vocab wide) when first_logit < n.
  void eval_chunk(KvCache& cache, std::span<const int32_t> tokens, int first_logit, float* logits,
                  bool row_invariant);

  ModelConfig config_;
  CpuWeights weights_;
  KvCache cache_;
  RopeTable rope_;                 // [capacity, head_dim/2] cos/sin
  int max_batch_ = 256;            // tokens per chunk
  bool bf16_activations_ = false;  // set_bf16_activations

  // Activation buffers, resized per chunk (n = chunk tokens).
  std::vector<float> x_;     // [n, hidden] residual stream
  std::vector<float> xn_;    // [n, hidden] normalized input of a block
  std::vector<float> q_;     // [n, q_dim]
  std::vector<float> k_;     // [n, kv_dim]
  std::vector<float> v_;     // [n, kv_dim]
  std::vector<float> attn_;  // [n, q_dim] attention output
  std::vector<float> proj_;  // [n, hidden] output of wo / w_down
  std::vector<float> gate_;  // [n, intermediate]
  std::vector<float> up_;    // [n, intermediate]
  AttentionScratch scratch_;
};

}  // namespace futr::cpu
