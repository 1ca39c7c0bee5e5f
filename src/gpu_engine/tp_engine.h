// Tensor parallelism over N GPUs of one host behind runtime::Engine:
// N rank engines (gpu_engine/engine.h, GpuEngineOptions::tp_comms), rank r on GPU r
// with its shard of the model (runtime/tensor_parallel.h: whole query / KV
// heads and SwiGLU units per rank, the O and down projections row-parallel
// and all-reduced with NCCL inside each rank's CUDA graph, the LM head split
// by vocabulary), one host thread per rank for each step.
//
// A step: the rows are checked once (runtime::plan_batch), every rank runs the
// same rows (so the micro-steps and their collectives match), and the rows
// that need the distribution come back from each rank as its vocabulary
// shard's logits; they are concatenated in rank order on the host, where the
// log-probabilities (runtime::token_nll), greedy tokens and samples (the
// sequences' runtime::Sampler) are computed. (First version: the host does
// what the single-GPU engine does on the GPU; the shard reductions of
// runtime::shard_argmax and an all-gather are the next step.)
//
// Failures: a rank that throws aborts the communicators (gpu_engine/nccl.h), so the
// other ranks' waits end with an error instead of a hang; the step rethrows
// the first rank's error. A collective that does not finish within
// GpuEngineOptions::tp_timeout_s aborts every rank.
//
// Synthetic models: each rank draws its own shard's weights on its device
// (the embedding and the whole LM head from the same seeds on every rank, so
// they agree); numerically a different model than the same --synthetic at
// TP 1 (for speed, not for comparisons). Real models: each rank's INT4
// shard is cut on the host from the loaded weights
// (runtime::shard_quantized_weights), so TP N computes what TP 1 does up to
// the order of the partial sums.
//
// Test: tests/gpu_engine/tp_engine_test.cpp (TP 1 through NCCL equals the plain
// engine bit for bit; TP 2 / 4 / 8 against TP 1 where that many GPUs exist).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "gpu_engine/engine.h"
#include "runtime/sequence_table.h"
#include "runtime/tensor_parallel.h"

namespace futr::gpu {

class NcclComms;

class TpGpuEngine final : public runtime::TableEngine {
 public:
  // `tp` ranks on GPUs 0..tp-1. futr::Error when the machine has fewer GPUs,
  // when tp does not divide the model (runtime::make_tensor_parallel_plan), or
  // when NCCL is missing.
  TpGpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q, const GpuEngineOptions& o,
              int tp);
  TpGpuEngine(const ModelConfig& config, uint64_t seed, const GpuEngineOptions& o, int tp);
  ~TpGpuEngine() override;

  void open(runtime::SeqId id, const runtime::SamplerConfig& sampling = {}) override;
  void truncate(runtime::SeqId id, int len) override;
  void close(runtime::SeqId id) override;
  runtime::StepResult step(std::span<const runtime::BatchRow> rows) override;
  nlohmann::json stats() const override;

  int tp() const { return plan_.tp; }

 private:
  // Checks the machine and the plan, makes the communicators.
  void prepare(const ModelConfig& c, int tp);
  // Runs f(rank) on every rank, each in its own thread with the rank's device
  // current; on a rank's failure aborts the communicators, then rethrows the
  // first failure once every thread has ended.
  void on_ranks(const std::function<void(int)>& f);
  GpuEngineOptions rank_options(const GpuEngineOptions& o, const ModelConfig& c, int rank) const;

  ModelConfig config_;
  // (table_, from TableEngine: lengths and the sequences' samplers; the ranks keep lengths too)
  runtime::TensorParallelPlan plan_;
  std::unique_ptr<NcclComms> comms_;
  std::vector<std::unique_ptr<GpuEngine>> ranks_;
  int32_t sampleable_vocab_ = 0;
  int64_t steps_ = 0;
};

}  // namespace futr::gpu
