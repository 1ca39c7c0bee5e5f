// The launch executor: runs a step plan (gpu_engine/step_plan.h) as one kernel
// launch per op on a stream, and replays it as one CUDA graph per bucket.
//
// Per op (StepOpKind), the launcher of launch/ it calls:
//   embed_norm     cuda::rmsnorm (the token gather, no PDL: the first kernel)
//   gemm           cuda::W4Linear::forward with the op's configuration (and the
//                  fused RMSNorm input or the SwiGLU staging); tensor parallel:
//                  NcclComms::all_reduce_bf16 of its output after it
//   rope_append    cuda::kv_append (RoPE fused in)
//   attention      cuda::decode_attention (the plan's split count)
//   norm           cuda::rmsnorm (residual add)
//   swiglu         cuda::swiglu
//   lm_head        cuda::CublasLt::matmul, BF16 x BF16 -> FP32 (a plain launch)
//   logits_reduce  cuda::logits_reduce
//   sample         cuda::sample_topk
// PDL (Options::pdl): every op the plan marks (all but the first and the LM
// head) launches as a programmatic dependent of the one before, in the graphs
// too; while profiling, none does (the intervals must not overlap).
//
// run(): the bucket's first micro-step runs eagerly (it creates cuBLASLt's
// plan for the head and loads the kernels' modules, neither of which may
// happen during a capture); the next ones capture the launches once into the
// bucket's graph and replay it (Options::graphs; off: eager launches every
// time, the same launches in the same order, the same bits). A profiled
// micro-step (a Profiler given, after the bucket's eager one) is captured with
// an event node after every launch and replayed once.
//
// enqueue_outputs(): the output pass of a prefill chunk's rows that asked for
// one (final RMSNorm gathering the chunk's residual rows, the same LM head
// and reductions as the step's), eager.
//
// StepBuffers: the device buffers of one micro-step of up to kDecodeMaxRows
// rows, allocated once; the row map (MapRow) and the samplers are the graphs'
// static inputs (the engine writes them before each run), the row stats, the
// sampled tokens, the logits and the K/V non-finite counter their outputs.
//
// Tests: tests/gpu_engine/engine_test.cpp (graph replay and PDL against eager
// launches bit for bit; the profile covers every launch),
// tests/gpu_engine/invariance_test.cpp (a row's bits in any bucket).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "gpu_engine/step_plan.h"
#include "launch/buffer.h"
#include "launch/decode_attention.h"
#include "launch/decode_ops.h"
#include "launch/stream.h"
#include "model/model.h"

namespace futr::cuda {
class CublasLt;  // launch/cublaslt.h
}

namespace futr::gpu {

class DeviceWeights;  // gpu_engine/device_weights.h
class KvCache;        // gpu_engine/kv_cache.h
class NcclComms;      // gpu_engine/nccl.h
class Profiler;       // gpu_engine/profiler.h

// The device buffers of one micro-step (R = kDecodeMaxRows rows).
struct StepBuffers {
  // shape: the attention's shape at R rows (its workspace), attention: its split count;
  // table_stride: entries per row of the block tables (a paged cache; 0: contiguous).
  StepBuffers(const ModelConfig& c, int lm_rows, const cuda::AttentionShape& shape,
              const cuda::AttentionConfig& attention, int table_stride = 0);

  cuda::DeviceBuffer<float> x;   // [R][H] FP32 residual
  cuda::DeviceBuffer<float> x2;  // [8][H] the residual's other buffer (fused norm, micro-steps of <= 8 rows)
  cuda::DeviceBuffer<uint16_t> a;     // [R][H] BF16 GEMM input (zeroed: the LM head reads all R rows)
  cuda::DeviceBuffer<uint16_t> qkv;   // [R][q + 2 kv] BF16
  cuda::DeviceBuffer<uint16_t> attn;  // [R][q] BF16
  cuda::DeviceBuffer<uint16_t> y;     // [R][H] BF16 projection output (O, down)
  cuda::DeviceBuffer<uint16_t> gu;    // [R][2I] BF16 gate|up
  cuda::DeviceBuffer<uint16_t> sw;    // [R][I] BF16 silu(g) u
  cuda::DeviceBuffer<float> logits;   // [R][lm_rows] FP32
  cuda::DeviceBuffer<int> ints;       // [kMapRows][R]: the row map (MapRow), a static input
  // A paged cache: [R][table_stride] the rows' block tables (row i: its
  // sequence's blocks in position order), a static input beside the row map.
  cuda::DeviceBuffer<int> tables;
  int table_stride = 0;
  cuda::DeviceBuffer<cuda::LogitsRowStats> row_stats;  // [R] the reductions' output
  cuda::DeviceBuffer<cuda::SampleRow> samplers;  // [R] the rows' GPU samplers (top_k 0: none), static input
  cuda::DeviceBuffer<int> sampled;               // [R] sample_topk's tokens
  cuda::DeviceBuffer<int> nonfinite;             // [1] the appends' count of non-finite K/V rows
  cuda::DeviceBuffer<float> attn_ws;             // the attention's split workspace
  cuda::DeviceBuffer<int> attn_counters;         // its split arrival counters (zero between launches)

  const int* map(MapRow r) const { return ints.get() + size_t(r) * kDecodeMaxRows; }  // [R] device
  void* get(StepAct a) const;                                                         // the buffer of `a`
};

class LaunchExecutor {
 public:
  struct Options {
    bool graphs = true;             // replay one graph per bucket
    bool pdl = true;                // programmatic dependent launch between the ops
    NcclComms* tp_comms = nullptr;  // tensor parallelism: the all-reduces' communicators
    int tp_rank = 0;
    int hidden = 0;         // H: the residual's width
    float rms_eps = 1e-5f;  // the RMSNorms' epsilon
    bool lm_head_streaming =
        false;                  // enqueue_outputs' head: our streaming kernel (else cuBLASLt), as the plans'
    bool lm_head_int4 = false;  // and over the INT4 head
  };
  // Borrows everything (the engine owns it all and outlives the executor).
  LaunchExecutor(const DeviceWeights& w, const KvCache& kv, StepBuffers& b, cuda::CublasLt& lt,
                 const Options& o);

  // The launches of `plan` on `st` (what a graph captures); with `prof`, an
  // event after each (no PDL).
  void enqueue(const StepPlan& plan, cudaStream_t st, Profiler* prof) const;
  // One micro-step of `plan`: eager (the bucket's first), a graph replay, or
  // profiled (prof given, after the bucket's first); asynchronous on st.
  void run(const StepPlan& plan, cudaStream_t st, Profiler* prof);
  // The output pass of `rows` (<= kDecodeMaxRows) rows of a prefill chunk,
  // eager, no PDL: x = the chunk's BF16 residual rows x_rows[tok] (the row
  // map's kTok entries, written by the caller), a = RMSNorm(x) g_out, the LM
  // head as the decode step runs it (the same kernel, the same bits: cuBLASLt
  // over kDecodeMaxRows rows, or the streaming kernel over `rows`), the
  // logits reductions with the kTarget entries.
  void enqueue_outputs(int rows, const uint16_t* x_rows, cudaStream_t st);

  int graphs_captured() const;
  int64_t graph_launches() const { return graph_launches_; }

 private:
  // The kernels' view of the step's block tables (a paged cache; empty: contiguous).
  layout::KvBlockTable block_tables() const;

  const DeviceWeights& w_;  // the matrices, gains, embedding and head the ops read
  const KvCache& kv_;       // the layers the appends write and the attention reads; the RoPE tables
  StepBuffers& b_;          // the activations, row map and results
  cuda::CublasLt& lt_;      // the LM head's matmul (its plan per M made on the eager first run)
  Options o_;
  std::array<cuda::Graph, kDecodeBuckets.size()> graphs_;  // kDecodeBuckets order
  std::array<bool, kDecodeBuckets.size()> warm_{};         // the bucket ran eagerly once
  int64_t graph_launches_ = 0;
};

}  // namespace futr::gpu
