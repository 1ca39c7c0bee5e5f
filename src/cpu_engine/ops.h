// The building blocks of the Llama forward pass in FP32, each a plain
// function with its formula. cpu_engine/forward.cpp composes them; GPU kernels and
// their epilogues are specified by them (docs/CPU_BACKEND.md).
//
// Conventions: activations are row-major [n_tokens, width]; a row of q holds
// n_heads consecutive head vectors of head_dim values (so head h of token i is
// q[i * ld + h * head_dim + d]); same for k, v with n_kv_heads.
//
// Tests: tests/cpu_engine/ops_test.cpp compares each function with a naive
// double-precision transcription of its formula.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu_engine/kv_cache.h"
#include "model/config.h"
#include "model/rope.h"

namespace futr::cpu {

using futr::make_rope_table;
using futr::RopeTable;

// --- Embedding --------------------------------------------------------------
// x[i, :] = E[token_i, :]                      E: [vocab, hidden]
// Throws futr::Error for a token id outside [0, vocab).
void embed(const float* table, int64_t vocab, int hidden, std::span<const int32_t> tokens, float* x);

// --- RMSNorm ----------------------------------------------------------------
// For each of the n rows of width d (computed in FP32, sum in double):
//   r    = 1 / sqrt(mean_j(x_j^2) + eps)
//   y_j  = x_j * r * g_j
// x and y may be the same array.
void rmsnorm(const float* x, const float* g, float* y, int64_t n, int d, float eps);

// --- RoPE ---------------------------------------------------------------------
// Rotary position embedding in the Hugging Face "rotate_half" pairing: within
// a head of dimension D, dimension i (i < D/2) pairs with i + D/2 and the pair
// is rotated by the angle  pos * f_i:
//   x'_i      = x_i cos(pos f_i) - x_{i+D/2} sin(pos f_i)
//   x'_{i+D/2}= x_{i+D/2} cos(pos f_i) + x_i sin(pos f_i)
// with the inverse frequencies f_i of model/rope.h (rope_inv_freq, including
// llama3 scaling: the one home of that spec).
//
// The cos/sin table: model/rope.h (RopeTable, make_rope_table), shared with
// the GPU engine.

// Rotate the first `heads` head vectors of each of n rows (row stride ld) in
// place; row i is at position pos0 + i (< table.max_pos).
void apply_rope(float* x, int64_t n, int heads, int64_t ld, int pos0, const RopeTable& table);

// --- Causal grouped-query attention ------------------------------------------
// Query head h reads KV head g = h / (n_heads / n_kv_heads). For the query row
// at position p = pos0 + i and visible keys t = 0..p:
//   s_t   = (q . k_t) / sqrt(head_dim)
//   a_t   = exp(s_t - max_t s_t) / sum_t exp(s_t - max_t s_t)     (causal: t <= p)
//   out   = sum_t a_t v_t
// q: [n, n_heads * head_dim] with row stride ldq; out likewise with ldo.
// kv.len must be pos0 + n (the new rows are already in the cache).
// S = Q K^T and O = A V run as single-threaded cblas_sgemm per task (one
// head, one block of 128 query rows, only keys up to the block's last
// position), the tasks spread over the OpenMP threads.
struct AttentionScratch {
  std::vector<std::vector<float>> scores;  // per thread: [rows of a block, visible keys]
};
void causal_attention(const float* q, int64_t ldq, int n, int pos0, int n_heads, int head_dim,
                      const KvLayerView& kv, float* out, int64_t ldo, AttentionScratch& scratch);

// --- SwiGLU -------------------------------------------------------------------
//   h = silu(g) * u,   silu(g) = g / (1 + exp(-g))       (elementwise, count values)
void swiglu(const float* gate, const float* up, float* out, int64_t count);

// --- Residual -----------------------------------------------------------------
//   x += y   (count values)
void add_inplace(float* x, const float* y, int64_t count);

}  // namespace futr::cpu
