// The GPU engine behind runtime::Engine (runtime/engine.h): the decode path of
// the design on one Hopper GPU, INT4 weights and a BF16 / INT4 / rotated INT4
// KV cache, checked against the CPU quantized reference (cpu_engine/engine.h) that
// computes the same formats.
//
// Per micro-step of B <= 32 rows (of one or several sequences; a sequence's
// rows consecutive positions, in order), padded to a bucket b in
// {1, 2, 4, 8, 16, 32} (below), with the FP32 residual
// x [b][H] and BF16 activations:
//
//   x = E[token]; a = bf16(RMSNorm(x) g_attn[0])                  sm90_rmsnorm (gather)
//   for each layer l:
//     qkv = a Wqkv^T                                 INT4 GEMM   [b][q + 2 kv] BF16
//     RoPE(q, k); K/V -> the cache (BF16 + mirror)               sm90_kv_append (RoPE fused in)
//     o   = attention(q, cache)                                   sm90_decode_attention
//     x  += o Wo^T; a = bf16(RMSNorm(x) g_ffn)                   INT4 GEMM, sm90_rmsnorm (add)
//     gu  = a Wgu^T; s = bf16(silu(g) u)                          INT4 GEMM, sm90_swiglu
//     x  += s Wdown^T; a = bf16(RMSNorm(x) g_next)               INT4 GEMM, sm90_rmsnorm (add)
//       (b <= fuse_norm_rows, 4 by default: the projections but O run as the gemv; the down
//        GEMM's stages s = bf16(silu(g) u) itself: no sm90_swiglu launch; the QKV and gate/up
//        ones compute a = bf16(RMSNorm(x + y) g) from the residual themselves, x alternating
//        between two buffers: no sm90_rmsnorm launch but the first and the last)
//   logits = a Wlm^T                                  cuBLASLt BF16 x BF16 -> FP32
//   per row: argmax, log-sum-exp, log p(target)       sm90_logits_reduce
//   per sampled row: the drawn token                   sm90_sample_topk
//
// What comes back per output row (only what the row asked for):
//   kLogprob                 one double (log p(target) from the reduction);
//   kToken, greedy sampler   one int (the argmax: lowest id among ties, as
//                            runtime::argmax), when Sampler::plain_greedy();
//   kToken, a sampler with temperature > 0, no penalty in force and
//                            1 <= top_k <= 1024: one int, drawn by sm90_sample_topk
//                            with the host sampler's rule and a uniform the host
//                            drew from the sequence's generator (mt19937_64), so
//                            the token is the one the host would draw from the
//                            same logits (Sampler::engine_drawable; off with
//                            GpuEngineOptions::gpu_sampling / FUTR_GPU_SAMPLING=0);
//   kToken, any other sampler  the row's FP32 logits, and the HOST sampler draws
//                            (penalties, top_k <= 0 or > 1024);
//   kLogits                  the row's FP32 logits.
// Only the rows that need logits are copied (one row each), never the whole
// [b][vocab] block. A row whose logits hold NaN or +inf gets the host's answer
// (its logits are copied after the check: token_nll gives NaN, the sampler
// its own rule), so the GPU path never hides a broken row behind a finite number.
//
// PDL (GpuEngineOptions::pdl, default on): every kernel of the step after the
// first is launched as a programmatic dependent of the one before (the GEMMs
// stream their first weights before griddepcontrol.wait; the small kernels
// wait first), inside the graphs too; the LM head (cuBLASLt) is launched
// normally. Off, the same kernels run with plain stream order (same bits).
//
// CUDA graphs (GpuEngineOptions::graphs, default on; FUTR_GPU_GRAPHS=0 in the
// environment turns them off for debugging): the whole micro-step above, from
// the embedding gather through the reductions, is captured once per bucket
// and replayed with cudaGraphLaunch. Its inputs are static device buffers (the
// row map: tokens, positions, slot bases, KV lengths, row index, targets),
// written by one host-to-device copy before the launch; the results (row
// stats, the logits rows asked for, the K/V non-finite counter) come back by
// copies after it, then ONE stream synchronization per micro-step. Inside the
// graph: no allocation, no host synchronization, no host-side decision.
//   - The first micro-step of each bucket runs eagerly (it creates cuBLASLt's
//     plan for M = b and loads the kernels' modules, neither of which may
//     happen during capture); the next ones capture and replay.
//   - The eager path (graphs off) issues the same launches with the same
//     bucket padding, so graph replay and eager runs give the same bits
//     (tests/gpu_engine/engine_test.cpp checks bitwise equality).
//   - Padding: rows B..b-1 of a bucket are dummies (token 0, target -1) whose
//     results are discarded. Dummy row j writes its K/V at position j of a
//     scratch region of kMaxMicroBatch slots past every sequence's slots (kv_cache.h)
//     (num_slots = max_seqs x slots_per_seq + 32; paged: whole scratch blocks
//     past the pool's, which the dummy rows' block tables point to), attends
//     over positions [0, j] of that region, and so never reads or writes a slot
//     any sequence owns; distinct j write distinct slots (no write races). The
//     RoPE table covers max(ctx, 32) positions for them.
//   - Paged KV cache (GpuEngineOptions::kv_block_size; docs/LAYOUTS.md "Paged
//     KV cache"): runtime::BlockPool hands out the blocks (the step checks
//     and takes every block it needs before any row runs, copy-on-write as
//     device copies of a block); the row map's static companion is a
//     [kMaxMicroBatch][table stride] table of block ids, each row its
//     sequence's blocks, of which the entries the rows read are copied with
//     the row map; the prefill path uploads its chunk's request tables. Full
//     blocks are indexed by their token prefix after the step (attach_prefix);
//     outputs are the contiguous cache's bit for bit (tests/gpu_engine/paged_test.cpp).
//   - Graph validity for any sequence lengths: the INT4 GEMMs' configuration
//     depends only on (M = b, N, K) and their split-K counters re-arm
//     themselves; the attention's split count is chosen once for the maximum
//     context (ctx) and the kernel cuts each sequence's own length into that
//     many chunks at run time (kv_len is read on the device), so one capture
//     is valid for every length <= ctx. The price: short contexts run with
//     the long context's split count (extra, nearly empty CTAs).
//
// Batch invariance: a row's logits have the same bits whatever bucket it
// runs in and whatever rows share its micro-step. Every reduction a row
// passes through has one order fixed by the shapes, never by the batch: the
// INT4 GEMMs' K split is a function of (N, K) (cuda::decode_splits; the gemv
// and skinny kernels share the per-row arithmetic), the attention's split
// count one for every bucket (cuda::attention_heuristic_invariant), the
// RMSNorm factor summed in the same order by sm90_rmsnorm and by the gemv's
// fused norm, the LM head always over kMaxMicroBatch rows (cuBLASLt chooses
// its kernel by M) or, with GpuEngineOptions::lm_head_streaming, by our
// streaming kernel over the bucket's rows (one chain of MMAs per logit over K
// for any M: sm90_lm_head.cuh). Tests: tests/gpu_engine/invariance_test.cpp.
//
// Where the pieces live (one home per concept):
//   gpu_engine/device_weights.h   the weights on the device: INT4 projections (fused q|k|v,
//                                 gate|up), BF16 embedding, gains and LM head, and the FP8
//                                 projections of the prefill path, one object both read;
//                                 uploaded in the layouts the .futr file stores (no FP32 on
//                                 the host), or drawn on the device for a synthetic model
//                                 (the second constructor: benchmarks of real shapes with
//                                 no checkpoint and no host buffer of the model's size);
//   gpu_engine/kv_cache.h         the KV cache: one slot region of round_up(ctx, 16) slots
//                                 per sequence slot (kernels/layout/kv_cache.cuh), the padding
//                                 rows' scratch slots, the RoPE tables, allocated up front; a
//                                 cache that does not fit in GPU memory is refused naming what
//                                 would fit;
//   gpu_engine/step_plan.h        the micro-step above as data: its ops (kind, layer, buffers,
//                                 weights, shapes, configuration), one plan per bucket, built
//                                 once at construction with the batch-invariant choices;
//   gpu_engine/launch_executor.h  the step's device buffers and the executor that runs a plan
//                                 (launches, PDL, one CUDA graph per bucket);
//   gpu_engine/profiler.h         the per-launch profile of micro-steps and prefill chunks;
//   gpu_engine/prefill.h          the FP8 prefill path (borrows the weights and the cache).
// This class keeps the batching into micro-steps, the sampling policy (which
// rows the GPU draws, which the host) and the one writer of the step's outputs.
//
// A step: runtime::plan_batch() checks every row first; then micro-steps of
// up to 32 rows: one row of every run (sequence) first, then more rows of the
// runs that have more (prompt chunks), so a step of runs of lengths n_1..n_S
// costs about max(ceil(sum_i n_i / 32), ...) micro-steps instead of max_i n_i.
// A row attends to the K/V the earlier rows of its run append in the same
// micro-step (the append kernel completes before the attention reads).
//
// Prompts through the FP8 prefill path (gpu_engine/prefill.h; when the engine has
// FP8 weights: GpuEngineOptions::prefill_fp8 or prefill_synthetic): the runs
// of a step's prompt rows (BatchRow::prompt) go first, packed into chunks
// (with delayed FP8 scaling: chunks of one sequence, each sequence with its
// own scale state, reset when it is opened)
// of at most prefill_rows rows (a longer run continues in the next chunk);
// each chunk runs every layer through the FP8 GEMMs and the prefill
// attention, writes its K/V (and the INT4 mirror) with the decode path's
// append kernel, and the rows that asked for an output take the decode path's
// final norm, LM head and reductions in blocks of 32 (kToken rows of a
// non-greedy sampler are drawn by the host from their copied logits). The
// other runs (decode rows) then go through the micro-steps above. Eager
// launches (no graph: chunk shapes vary), one synchronization per chunk.
//
// Tests: tests/gpu_engine/engine_test.cpp (against the CPU quantized reference; graph
// replay vs eager; GPU greedy / log-probabilities vs the host's),
// tests/gpu_engine/invariance_test.cpp (batch invariance),
// tests/gpu_engine/step_plan_test.cpp (the plans, without a GPU).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "core/number_formats.h"
#include "model/model.h"
#include "quant/delayed_scaling.h"
#include "quant/quantized_model.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/sequence_table.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers (factory.cpp includes this file)

namespace futr::cuda {
class DeviceScaleBank;  // launch/fp8_scaling.h
}

namespace futr::gpu {

class NcclComms;  // gpu_engine/nccl.h

struct GpuEngineOptions {
  KvFormat kv = KvFormat::kBf16;  // bf16 | int4 | int4-rot (resolved)
  int kv_block = 64;              // Hadamard block (int4-rot)
  int ctx = 0;                    // positions per sequence; 0: the model's
  int max_seqs = 1;               // sequences open at once
  int max_step_tokens = 256;      // rows per step()
  // A paged KV cache (docs/LAYOUTS.md "Paged KV cache"): blocks of kv_block_size
  // positions (16, 32, 64 or 128; 0: a region of ctx positions per sequence),
  // kv_blocks of them (0: max_seqs x ceil(ctx / kv_block_size), the regions' memory).
  int kv_block_size = 0;
  int64_t kv_blocks = 0;
  // Paged, kv_blocks 0: the blocks that fill this share of the GPU's memory
  // (with the weights and 1 GiB of workspaces; 0: the regions' memory as above).
  double gpu_memory_fraction = 0;
  bool graphs = true;  // replay one CUDA graph per bucket (FUTR_GPU_GRAPHS=0 forces false)
  bool pdl = true;     // programmatic dependent launch between the step's kernels (FUTR_GPU_PDL=0: false)
  bool gpu_sampling =
      true;  // temperature / top-k / min-p / top-p draws on the GPU (FUTR_GPU_SAMPLING=0: host)
  // Micro-steps of up to fuse_norm_rows rows: the residual add + RMSNorm fused
  // into the QKV and gate/up gemv, the SwiGLU into the down gemv
  // (cuda::DecodeNormInput; 6 launches per layer instead of 8 or 9).
  // Measured on the H200 (docs/PERF.md): SmolLM2 batch 1 0.929 -> 0.825 ms,
  // Llama-3.1-8B 2.541 -> 2.397 ms per step; 2 / 4 rows -2.4 / -5.3%
  // (SmolLM2), -8.5 / -0.7% (8B); 8 rows +1.8 / +15.5% (each CTA reads all 8
  // rows for the norm): fused up to 4. FUTR_GPU_FUSE_NORM=0 turns it off,
  // FUTR_GPU_FUSE_NORM_ROWS=N fuses buckets of at most N rows (1..8).
  bool fuse_norm = true;
  int fuse_norm_rows = 4;  // 1..8 (the gemv's rows at most: cuda::kDecodeGemvMaxRows)
  // At large batch, a CTA reduces several of a sequence's attention chunks in
  // turn (cuda::attention_ctas; the same bits). FUTR_GPU_ATTN_CTAS=0: one CTA per chunk.
  bool attn_ctas = true;
  // The LM head by our streaming kernel (launch/lm_head.h) over the bucket's
  // rows, a programmatic dependent of the norm before it, instead of cuBLASLt
  // over kMaxMicroBatch rows (the default until the H200 measurement in
  // bench/lm_head_bench.cpp decides). FUTR_GPU_LM_HEAD=streaming | cublaslt
  // overrides it. Needs H % 64 == 0 (refused otherwise).
  bool lm_head_streaming = false;
  // The LM head quantized to INT4 (--head int4; FUTR_GPU_LM_HEAD=int4): its
  // rows RTN with FP16 scales per group of 128 inputs (64 where H % 128 != 0)
  // at construction, run by the streaming kernel (implies lm_head_streaming):
  // a quarter of the head's bytes, at an accuracy cost (docs/ACCURACY.md).
  bool lm_head_int4 = false;

  // The FP8 prefill path (gpu_engine/prefill.h): its weights (format fp8: q/k/v and
  // gate/up with the RMSNorm gain folded in), or drawn on the device for a
  // synthetic model (prefill_synthetic); neither: prompts run through the
  // decode step. The prompt rows (BatchRow::prompt) take it, in chunks of at
  // most prefill_rows rows.
  std::shared_ptr<const quant::QuantizedWeights> prefill_fp8;
  // Told once the engine is ready: its construction time by phase.
  runtime::EngineLog log;
  bool prefill_synthetic = false;
  uint64_t prefill_seed = 0;  // the synthetic FP8 weights' seed
  quant::DelayedScalingConfig
      fp8;  // the prefill path's FP8 scaling: static, or delayed per request (policy clamp)
  // Calibration on the device at construction (prefill_fp8 quantized on load,
  // without stored amax): these tokens in windows of fp8_calibration_window
  // (PrefillPath::calibrate); empty: the weights' stored initial amax.
  std::vector<int32_t> fp8_calibration;
  int fp8_calibration_window = 512;
  int prefill_rows = 2048;

  // Tensor parallelism (gpu_engine/tp_engine.h drives the ranks): this engine is rank
  // tp_rank of tp_comms (null: none). Its weights are the rank's shard and its
  // configuration rank_config (runtime::rank_config: heads, KV heads and FFN
  // units / N); the O and down outputs are summed over the ranks (NCCL
  // all-reduce, in the graph) before the residual add; the LM head computes the
  // logits of vocabulary rows [lm_begin, lm_begin + lm_rows) only (StepResult
  // logits are that wide; GPU sampling is off). The calls must come from a
  // thread whose current device is the rank's.
  NcclComms* tp_comms = nullptr;
  int tp_rank = 0;
  std::optional<ModelConfig> rank_config;  // the model's config when empty
  int lm_begin = 0, lm_rows = 0;           // 0 rows: the whole vocabulary
  double tp_timeout_s = 60;                // a micro-step's collectives must finish within this
};

class GpuEngine final : public runtime::TableEngine {
 public:
  // q: INT4 projections of every layer (quantized on load or from a .futr
  // file). `model` (embedding, norms, LM head) must outlive the constructor only.
  GpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q, const GpuEngineOptions& o);
  // A synthetic model of `config`'s shapes: every weight drawn on the device
  // from `seed` (INT4 group 128, or 64 where K % 128 != 0).
  GpuEngine(const ModelConfig& config, uint64_t seed, const GpuEngineOptions& o);
  ~GpuEngine() override;

  void open(runtime::SeqId id, const runtime::SamplerConfig& sampling = {}) override;
  void truncate(runtime::SeqId id, int len) override;
  void close(runtime::SeqId id) override;
  runtime::StepResult step(std::span<const runtime::BatchRow> rows) override;
  // The paged cache (runtime/engine.h; the defaults of an engine that does not page otherwise).
  int64_t free_positions() const override;
  int64_t free_blocks() const override;
  int64_t blocks_needed(runtime::SeqId id, int n) const override;
  int attach_prefix(runtime::SeqId id, std::span<const int32_t> tokens) override;
  std::optional<runtime::Sampler> sampler_state(runtime::SeqId id) const override;
  // n rows of one sequence run as micro-steps padded to buckets: bucket_of(n) up to
  // kMaxMicroBatch, then whole micro-steps of kMaxMicroBatch rows and a bucket for the rest.
  int step_rows(int n) const override;
  void restore_sampler(runtime::SeqId id, const runtime::Sampler& sampler) override;
  nlohmann::json stats() const override;
  // Profiling (runtime::Engine::set_profiling): the prefill path's chunks
  // record an event after each launch (stats()["prefill"]["profile"],
  // gpu_engine/prefill.h); and while on, each micro-step is
  // captured into a graph with an event node after every launch (PDL off) and
  // replayed once (a bucket's first micro-step still runs eagerly);
  // stats()["profile"] sums each kind of launch (over layers and
  // micro-steps) in microseconds, beside the plan of the last bucket.
  bool set_profiling(bool on) override;

  // The decode step's plan for `bucket` (one of kBuckets), one line per op in
  // launch order (gpu_engine/step_plan.h StepPlan::describe); also
  // stats()["profile"]["plan"] for the profiled bucket.
  nlohmann::json step_plan(int bucket) const;

  // One layer's KV cache as stored (tests: the mirror the prefill writes
  // against the decode append's bytes); synchronizes.
  struct KvLayerDump {
    std::vector<uint16_t> k, v;   // [num_slots][kv_heads][D] BF16
    std::vector<uint8_t> k4, v4;  // the INT4 mirror (empty with the BF16 cache)
    std::vector<float> ks, vs;
    int num_slots = 0, slots_per_seq = 0;
  };
  KvLayerDump dump_kv_layer(int layer) const;

  static constexpr int kMaxMicroBatch = 32;  // rows of one decode micro-step
  static constexpr std::array<int, 6> kBuckets = {1, 2, 4, 8, 16, 32};
  // The smallest bucket holding `rows` (1..kMaxMicroBatch) rows.
  static int bucket_of(int rows);
  bool graphs() const { return opt_.graphs; }

 private:
  struct Impl;  // weights, KV cache, step plans and their executor, host buffers (engine.cpp)
  // One row of a micro-step.
  struct MicroRow {
    int token = 0, slot = 0, pos = 0;
    int target = -1;      // kLogprob target, else -1
    bool logits = false;  // copy its logits row back
    // A row sample_topk draws (top_k > 0): the sequence's sampler and its uniform.
    int top_k = 0;
    float temperature = 1, top_p = 1, min_p = 0;
    double u = 0;
  };
  // Common construction: validation, KV cache, the step's buffers, info.
  void init(const std::string& weights_what, size_t weights_bytes_estimate);
  // After the weights: the step plans of every bucket and their executor.
  void init_step();
  // Runs rows (<= kMaxMicroBatch): row stats into host stats, the logits of
  // the rows with .logits into host logits row k.
  void micro_step(const std::vector<MicroRow>& rows);
  // The decode and prefill rows of step() (its body; step() keeps the paged
  // cache's block accounting around it).
  void run_rows(std::span<const runtime::BatchRow> rows, const runtime::BatchPlan& plan,
                runtime::StepResult& r);
  // The one writer of a step's outputs: batch row `row` (sequence slot `slot`,
  // `rank` among the rows of its output kind) into r, from row k of the last
  // launch's results: its row stats, its logits (copied: already in the host
  // buffer, the host samples them), its token drawn by sample_topk (drawn).
  void write_output(const runtime::BatchRow& row, int slot, int rank, int k, bool copied, bool drawn,
                    runtime::StepResult& r);
  // The logits row k of the last micro-step, copied now (a rare fallback).
  const float* fetch_logits_row(int k);
  // The runs `runs` of a step through the prefill path (engine.h), their output
  // rows into r (rank: each row's index among the rows of its output kind).
  void prefill_runs(std::span<const runtime::BatchRow> rows, const std::vector<const runtime::SeqRun*>& runs,
                    const std::vector<int>& rank, runtime::StepResult& r);
  // Creates the prefill path from the options (constructors, after the weights) and warms it up.
  void init_prefill();
  // The row map of a micro-step of `rows` in `bucket` (>= rows.size(); the rest
  // padding rows), its block tables and sampler rows, copied to the device.
  void upload_row_map(const std::vector<MicroRow>& rows, int bucket);
  // Runs every bucket's plan on padding rows (eagerly, then into its graph).
  void warm_decode_buckets();
  // The output pass of `rows` (<= kMaxMicroBatch) rows of the last prefill
  // chunk: the host row map's kTok (the chunk row) and kTarget entries copied,
  // then the final RMSNorm (gathering the chunk's BF16 residual rows), the LM
  // head and the logits reductions, asynchronously on the engine's stream.
  void enqueue_prefill_outputs(int rows);
  // Delayed FP8 scaling: sequence slot `slot`'s own scale state (created on first use).
  cuda::DeviceScaleBank* seq_bank(int slot);

  ModelConfig config_;
  int lm_begin_ = 0, lm_rows_ = 0;  // the LM head's vocabulary rows (the whole vocabulary without TP)
  // The INT4 head's group: 128, or 64 where H % 128 != 0 (the quantizer's rule).
  int lm_head_int4_group() const { return config_.hidden % 128 == 0 ? 128 : 64; }
  int32_t sampleable_vocab_;  // ids a sampler may draw (the tokenizer's; padded LM-head rows excluded)
  GpuEngineOptions opt_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace futr::gpu
