// Tensor parallelism: the Megatron-style partition of a Llama
// model over N ranks (one GPU each), as a plain plan that the engines, the
// loaders and the CPU check all read. This file computes no activations: it
// says which rows and columns of each weight a rank owns, and it slices FP32
// weights on the host for the CPU check (tests/runtime/tensor_parallel_test.cpp).
//
// The split of one decoder layer, rank r of N, hidden H, head_dim D, query
// heads Nh, KV heads Nkv, intermediate I (each divided by N), residual x [n, H]
// replicated on every rank:
//
//   a    = RMSNorm(x; g_attn)                         replicated       [n, H]
//   qkv_r = a Wqkv_r^T                                column-parallel  [n, (Nh/N + 2 Nkv/N) D]
//          (Wqkv = [Wq; Wk; Wv], [Nh D + 2 Nkv D, H]; rank r owns query heads
//           [r Nh/N, (r+1) Nh/N) and KV heads [r Nkv/N, (r+1) Nkv/N): whole
//           heads, and the GQA groups stay together since Nh/Nkv is the same
//           on every rank; its KV cache holds only its own KV heads)
//   o_r  = attention(q_r, cache_r)                    local heads      [n, Nh/N D]
//   p_r  = o_r Wo[:, cols_r]^T                        row-parallel     [n, H] partial
//   x   += sum_r p_r                                  ** ALL-REDUCE 1 (sum) **
//   m    = RMSNorm(x; g_ffn)                          replicated
//   gu_r = m Wgu_r^T                                  column-parallel  [n, 2 I/N]
//          (Wgu = [Wgate; Wup], [2I, H]; rank r owns intermediate units
//           [r I/N, (r+1) I/N): gate row i and up row i together, so the
//           SwiGLU pair silu(g_i) u_i is computed locally)
//   s_r  = silu(g_r) * u_r                            local            [n, I/N]
//   p_r  = s_r Wdown[:, cols_r]^T                     row-parallel     [n, H] partial
//   x   += sum_r p_r                                  ** ALL-REDUCE 2 (sum) **
//
// Two all-reduces per layer of n x H values each (after O and after down);
// nothing else is communicated inside a layer. The LM head is split by
// vocabulary: rank r owns the rows [v0_r, v1_r) of Wlm [V, H] (contiguous,
// balanced; V need not divide by N) and computes its logits shard from the
// replicated RMSNorm(x; g_out). Then either
//   - greedy decode: each rank reduces its shard to (max, lowest id at the
//     max) and the ranks combine those pairs (an all-gather of N pairs or a
//     max-reduce; combine_shard_argmax() below is the rule: the largest value,
//     the lowest global id among ties, the same answer as runtime::argmax on
//     the concatenated row), or
//   - full logits (sampling, perplexity): an all-gather of the shards in rank
//     order gives the row [V] (uneven shards: pad each to the largest shard,
//     max_vocab_shard(), for a fixed-size NCCL all-gather, then drop the pad).
// The embedding and the norms are replicated (an embedding gather is cheap;
// a tied LM head is sharded like an untied one: the same rows of tok_embd).
//
// Refusals: N must divide Nh, Nkv and I (whole heads, no replicated KV heads,
// whole SwiGLU pairs); make_tensor_parallel_plan() throws futr::Error naming
// the numbers and the TP sizes that work for the model (the common divisors).
//
// The GPU side reads this plan: gpu_engine/tp_engine.h (rank engines, NCCL in
// gpu_engine/nccl.h, `--tp N`); docs/TENSOR_PARALLEL.md says what has run.
//
// Tests: tests/runtime/tensor_parallel_test.cpp (the split layer and head on
// the CPU against the unsplit forward pass, TP 1 / 2 / 4 / 8; the refusals).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "quant/quantized_model.h"

namespace futr::runtime {

// A half-open index range [begin, end).
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

// What rank `rank` owns. "Rows" index a weight's output dimension (its first,
// [out, in]), "cols" its input dimension (K). Ranges of a fused matrix are in
// that matrix's row space.
struct RankShard {
  int rank = 0;

  // --- attention ---
  IndexRange q_heads;   // query heads, of [0, n_heads): n_heads / N of them
  IndexRange kv_heads;  // KV heads, of [0, n_kv_heads): n_kv_heads / N of them
  // Rows of the fused Wqkv [q_dim + 2 kv_dim, H] (q | k | v blocks). In the
  // unfused weights: wq rows q_rows, wk rows k_rows - q_dim, wv rows
  // v_rows - q_dim - kv_dim. The rank's own fused matrix is the three ranges
  // concatenated: [(q_heads + 2 kv_heads) * head_dim, H].
  IndexRange q_rows;  // [q_heads.begin * D, q_heads.end * D)
  IndexRange k_rows;  // q_dim + [kv_heads.begin * D, kv_heads.end * D)
  IndexRange v_rows;  // q_dim + kv_dim + [kv_heads.begin * D, kv_heads.end * D)
  IndexRange o_cols;  // input columns of Wo [H, q_dim]: equal to q_rows

  // --- feed-forward (SwiGLU) ---
  IndexRange ffn;  // intermediate units, of [0, I): I / N of them
  // Rows of the fused Wgu [2I, H] (gate | up blocks): gate row i and up row i
  // (= fused row I + i) belong to the same rank. The rank's fused matrix is
  // [gate_rows; up_rows]: [2 I/N, H].
  IndexRange gate_rows;  // ffn
  IndexRange up_rows;    // I + ffn
  IndexRange down_cols;  // input columns of Wdown [H, I]: equal to ffn

  // --- LM head ---
  IndexRange vocab;  // rows of Wlm [V, H] (tok_embd when tied); logits ids
};

struct TensorParallelPlan {
  int tp = 1;                    // N, ranks
  int hidden = 0;                // H: width of the all-reduced partials
  int head_dim = 0;              // D
  int q_dim = 0;                 // n_heads * D (full model)
  int kv_dim = 0;                // n_kv_heads * D (full model)
  int intermediate = 0;          // I (full model)
  int vocab = 0;                 // V (full model)
  std::vector<RankShard> ranks;  // [tp], rank r at index r

  // Per-rank sizes (the same on every rank except the vocabulary shard).
  int q_heads_per_rank() const;     // n_heads / N
  int kv_heads_per_rank() const;    // n_kv_heads / N
  int ffn_per_rank() const;         // I / N
  int qkv_rows_per_rank() const;    // (q + 2 kv heads per rank) * D
  int64_t max_vocab_shard() const;  // ceil(V / N): padded all-gather size
};

// The TP sizes that divide n_heads, n_kv_heads and intermediate (the common
// divisors, ascending; always contains 1).
std::vector<int> valid_tp_sizes(const ModelConfig& c);

// The plan for `tp` ranks. futr::Error (naming the numbers and the sizes that
// work) when tp < 1, when tp does not divide n_heads, n_kv_heads or
// intermediate, or when the config is not a GQA config (n_heads % n_kv_heads).
TensorParallelPlan make_tensor_parallel_plan(const ModelConfig& c, int tp);

// --- Host slicing of row-major FP32 weights [n_out, k] (the CPU check; the
// sharded loader reads the same ranges from the file) ---

// The rows `ranges` of w, concatenated in order: [sum of sizes, k]. Builds a
// rank's fused matrix from a fused or single weight, e.g.
// take_rows(wqkv, {s.q_rows, s.k_rows, s.v_rows}).
Tensor take_rows(const Tensor& w, std::initializer_list<IndexRange> ranges);
// The input columns `cols` of w: [n_out, cols.size()].
Tensor take_cols(const Tensor& w, IndexRange cols);
// Matrices stacked by rows (equal widths): [sum of rows, k]. Makes the fused
// Wqkv = [Wq; Wk; Wv] and Wgu = [Wgate; Wup] from the canonical weights.
Tensor stack_rows(std::initializer_list<const Tensor*> parts);

// --- A rank's model: its configuration and its quantized weights ---

// The configuration a rank's engine runs: n_heads / N query heads, n_kv_heads / N
// KV heads and intermediate / N units per layer (hidden, head_dim, vocabulary
// and everything else as the model's). Its O and down projections then make
// partial sums (all-reduced before the residual add) and its attention sees
// only its own heads.
ModelConfig rank_config(const ModelConfig& c, const TensorParallelPlan& p);

// Rank `rank`'s shard of every layer's projections, in the unfused form the
// engines read (quant/quantized_model.h): wq / wk / wv rows of its heads,
// wgate / wup rows of its units (column-parallel), wo / wdown input columns
// of its heads / units (row-parallel). INT4, FP8 and BF16 tensors; an INT4
// column shard must hold whole scale groups (futr::Error naming the projection,
// the width and the group otherwise, e.g. TP 8 of a 512-unit FFN at group 128).
// The LM head and the embedding are not here (BF16 in the model; the head's
// rows are RankShard::vocab).
quant::QuantizedWeights shard_quantized_weights(const quant::QuantizedWeights& q, const TensorParallelPlan& p,
                                                int rank);

// --- The vocabulary-sharded argmax ---
struct ShardMax {
  float value = 0;  // the shard's largest logit
  int64_t id = 0;   // its global token id (lowest among ties within the shard)
};
// The shard's ShardMax: logits [vocab.size()] of the ids [vocab.begin, end).
// futr::Error on an empty shard. The same scan as runtime::argmax.
ShardMax shard_argmax(std::span<const float> logits, IndexRange vocab);
// The combine of the ranks' pairs: the largest value, the lowest id among
// equal values (futr::Error when empty). For finite logits this equals
// runtime::argmax over the concatenated row (a row holding NaN is not
// defined here: the engines handle non-finite rows separately).
ShardMax combine_shard_argmax(std::span<const ShardMax> shards);

}  // namespace futr::runtime
