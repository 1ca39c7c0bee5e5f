// The GPU engine behind runtime::Engine (runtime/engine.h): the decode path of
// DESIGN.md on one Hopper GPU, INT4 weights and a BF16 / INT4 / rotated INT4
// KV cache, checked against the CPU quantized reference (cpu/engine.h) that
// computes the same formats.
//
// Per micro-step of B <= 32 rows (one row per sequence, distinct sequences),
// with the FP32 residual x [B][H] and BF16 activations:
//
//   x = E[token]; a = bf16(RMSNorm(x) g_attn[0])                  sm90_rmsnorm (gather)
//   for each layer l:
//     qkv = a Wqkv^T                                 INT4 GEMM   [B][q + 2 kv] BF16
//     RoPE(q, k) in place; K/V -> the cache (BF16 + mirror)      sm90_rope, sm90_kv_append
//     o   = attention(q, cache)                                   sm90_decode_attention
//     x  += o Wo^T; a = bf16(RMSNorm(x) g_ffn)                   INT4 GEMM, sm90_rmsnorm (add)
//     gu  = a Wgu^T; s = bf16(silu(g) u)                          INT4 GEMM, sm90_swiglu
//     x  += s Wdown^T; a = bf16(RMSNorm(x) g_next)               INT4 GEMM, sm90_rmsnorm (add)
//   logits = a Wlm^T                                  cuBLASLt BF16 x BF16 -> FP32
//
// Weights stay in the layouts the .futr file stores: the INT4 projections of a
// layer are fused (q|k|v, gate|up) by concatenating their logical INT4 rows and
// packing once on the host (no FP32); embedding, norm gains and the LM head
// are BF16. The KV cache is one slot region of round_up(ctx, 16) slots per
// sequence slot (device/layout/kv_cache.cuh), allocated up front; a cache that
// does not fit in GPU memory is refused naming what would fit.
//
// A step: runtime::plan_batch() checks every row first; prompt rows run one
// position per micro-step, batched across sequences (the prefill path is
// issue 12): so a step of runs of lengths n_1..n_S costs max_i n_i micro-steps
// of up to 32 rows. The rows that asked for output get their logits row
// (FP32, copied to the host), a token from the sequence's sampler, or log
// softmax[target].
//
// Tests: tests/gpu/engine_test.cpp (against the CPU quantized reference).
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/formats.h"
#include "model/model.h"
#include "quant/quantized_model.h"
#include "runtime/engine.h"

namespace futr::gpu {

struct GpuEngineOptions {
  KvFormat kv = KvFormat::kBf16;  // bf16 | int4 | int4-rot (resolved)
  int kv_block = 64;              // Hadamard block (int4-rot)
  int ctx = 0;                    // positions per sequence; 0: the model's
  int max_seqs = 1;               // sequences open at once
  int max_step_tokens = 256;      // rows per step()
};

class GpuEngine final : public runtime::Engine {
 public:
  // q: INT4 projections of every layer (quantized on load or from a .futr
  // file). `model` (embedding, norms, LM head, tokenizer) must outlive the engine.
  GpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q, const GpuEngineOptions& o);
  ~GpuEngine() override;

  void open(runtime::SeqId id, const runtime::SamplerConfig& sampling = {}) override;
  void truncate(runtime::SeqId id, int len) override;
  void close(runtime::SeqId id) override;
  bool is_open(runtime::SeqId id) const override { return index_.count(id) != 0; }
  int length(runtime::SeqId id) const override;
  runtime::StepResult step(std::span<const runtime::BatchRow> rows) override;
  int64_t free_positions() const override;
  int free_sequences() const override { return info_.max_seqs - int(index_.size()); }
  const runtime::EngineInfo& info() const override { return info_; }
  nlohmann::json stats() const override;

  static constexpr int kMaxMicroBatch = 32;  // rows of one decode micro-step

 private:
  struct Impl;  // device buffers, kernels' arguments (engine.cpp)
  struct Slot {
    std::optional<runtime::Sampler> sampler;
    int len = 0;
    bool open = false;
  };
  Slot& slot_of(runtime::SeqId id);
  const Slot& slot_of(runtime::SeqId id) const;
  // One micro-step: rows[i] = (token, slot, position); logits of all rows
  // come back into host_logits_ ([n][vocab]).
  void micro_step(const std::vector<int>& tokens, const std::vector<int>& slots, const std::vector<int>& pos);

  const Model& model_;
  GpuEngineOptions opt_;
  runtime::EngineInfo info_;
  std::unique_ptr<Impl> impl_;
  std::vector<Slot> slots_;                        // [max_seqs]
  std::unordered_map<runtime::SeqId, int> index_;  // open id -> slot
  std::vector<float> host_logits_;                 // [kMaxMicroBatch][vocab]
};

}  // namespace futr::gpu
