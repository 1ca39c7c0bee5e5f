// The CPU engines behind runtime::Engine (runtime/engine.h): the FP32
// reference (cpu::Forward with FP32 weights and an FP32 cache) and the
// quantized reference (cpu::QuantForward: BF16 / FP8 / INT4 weights, BF16 /
// INT4 / rotated INT4 KV storage, docs/QUANTIZATION.md).
//
// Sequences: up to max_seqs open at once (runtime::SequenceTable: ids, slots,
// lengths, samplers, the misuse checks). The weights, the RoPE table and the
// activation buffers are shared (one Forward). The KV cache is either
//   contiguous (kv_block_size 0): each slot its own cache of ctx positions
//     (allocated when the slot is first used, kept for the next sequence); or
//   paged (kv_block_size B > 0): one pool of kv_blocks blocks of B positions
//     (cpu_engine/paged_kv.h) shared by all sequences, blocks taken as a
//     sequence grows and given back when it closes, full blocks indexed by
//     their token prefix (runtime/kv_blocks.h) for attach_prefix(). Results
//     are bit for bit those of the contiguous cache, for any B.
//
// A step: runtime::plan_batch() checks every row first (misuse changes
// nothing), then each run of rows (one sequence) is one Forward::eval() on
// that sequence's cache, run after run. So a sequence's rows give bit for bit
// what they give in a step of their own; the rows that asked for output get
// their logits row, a token drawn by the sequence's sampler, or
// log softmax[target] (double, runtime/perplexity.h token_nll negated).
// Exception: FP8's delayed scaling is engine state (the amax history of every
// activation site, as on the GPU), so FP8 results depend on what ran before.
//
// stats(): {"engine", "sequences_open", "max_seqs", "ctx",
// "kv_positions_used", "kv_positions_free", "kv_bytes", "kv_paged" (paged
// only: block_size, blocks, blocks_free, blocks_used, blocks_cached,
// blocks_attached, blocks_evicted, block_copies), "fp8" (FP8 only:
// history, margin, policy, calls, saturated_calls, saturated_values,
// zero_calls, recomputes, max_amax)}.
//
// Tests: tests/runtime/engine_test.cpp.
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/number_formats.h"
#include "cpu_engine/forward.h"
#include "cpu_engine/paged_kv.h"
#include "cpu_engine/quant_forward.h"
#include "model/model.h"
#include "quant/delayed_scaling.h"
#include "quant/quantized_model.h"
#include "runtime/engine.h"
#include "runtime/kv_blocks.h"
#include "runtime/sequence_table.h"

namespace futr::cpu {

struct CpuEngineOptions {
  WeightFormat weights = WeightFormat::kFp32;  // resolved (not kAuto)
  KvFormat kv = KvFormat::kFp32;               // resolved (not kAuto)
  int kv_block = 64;                           // Hadamard block (int4-rot)
  quant::DelayedScalingConfig fp8;             // FP8 activations
  bool fp8_rms_in_cast = false;                // folded RMSNorm: 1/rms before the E4M3 cast
  bool fp8_gpu_numerics = false;               // the GPU prefill path's roundings (QuantRunOptions)
  int ctx = 0;                                 // positions per sequence; 0: the model's
  int max_seqs = 1;                            // sequences open at once (1..4096)
  int max_step_tokens = 256;                   // rows per step (1..2^20)
  int threads = 0;                             // OpenMP threads; 0: all (cpu_engine/threads.h)
  int kv_block_size = 0;                       // positions per KV block (1..65536); 0: contiguous caches
  int64_t kv_blocks = 0;                       // paged: blocks in all; 0: max_seqs x ceil(ctx / block)
};

class CpuEngine final : public runtime::Engine {
 public:
  // q: the quantized projections for fp8/int4 (and bf16 from a .futr file);
  // null otherwise. With fp32 weights and an fp32 cache this is the FP32
  // reference. `model` must outlive the engine.
  CpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q, const CpuEngineOptions& o);
  ~CpuEngine() override;

  void open(runtime::SeqId id, const runtime::SamplerConfig& sampling = {}) override;
  void truncate(runtime::SeqId id, int len) override;
  void close(runtime::SeqId id) override;
  bool is_open(runtime::SeqId id) const override { return table_.is_open(id); }
  int length(runtime::SeqId id) const override;
  runtime::StepResult step(std::span<const runtime::BatchRow> rows) override;
  int64_t free_positions() const override;
  int free_sequences() const override { return table_.free_sequences(); }
  int64_t free_blocks() const override { return pool_ ? pool_->free_blocks() : 0; }
  int64_t blocks_needed(runtime::SeqId id, int n) const override;
  int attach_prefix(runtime::SeqId id, std::span<const int32_t> tokens) override;
  std::optional<runtime::Sampler> sampler_state(runtime::SeqId id) const override;
  void restore_sampler(runtime::SeqId id, const runtime::Sampler& sampler) override;
  const runtime::EngineInfo& info() const override { return info_; }
  nlohmann::json stats() const override;
  // FP8 delayed scaling: the scales are engine state that dropped rows would
  // have changed (speculative decoding is off); empty otherwise.
  std::string rollback_unsupported_reason() const override;

  // The forward pass (tests, calibration).
  Forward& forward() { return quant_ ? quant_->forward() : *fp32_; }
  const Forward& forward() const { return quant_ ? quant_->forward() : *fp32_; }
  // FP8: the delayed-scaling state (nullptr otherwise).
  const quant::ScaleBank* fp8_bank() const { return quant_ ? quant_->fp8_bank() : nullptr; }

 private:
  struct Slot {
    std::unique_ptr<KvCache> own;     // the slot's cache (contiguous: slot 0 uses the Forward's own)
    KvCache* cache = nullptr;         // null until first used
    PagedKvStorage* paged = nullptr;  // paged: own's storage (its block table)
  };

  const Model& model_;
  CpuEngineOptions opt_;
  // Paged only (declared before the forward passes, whose caches view them).
  std::unique_ptr<runtime::BlockPool> pool_;  // which blocks each sequence holds, the prefix index
  std::unique_ptr<PagedKvPool> kv_pool_;      // the blocks' K/V
  std::unique_ptr<Forward> fp32_;             // the FP32 reference, or
  std::unique_ptr<QuantForward> quant_;       // the quantized reference
  runtime::EngineInfo info_;
  runtime::SequenceTable table_;  // ids -> slots, lengths (== the slot caches' lengths), samplers
  std::vector<Slot> slots_;       // [max_seqs]
};

}  // namespace futr::cpu
