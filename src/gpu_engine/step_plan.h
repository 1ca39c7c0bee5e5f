// The decode micro-step as data: the list of operations the GPU engine runs
// for one bucket of rows, built once per bucket and run by an executor
// (gpu_engine/launch_executor.h: one launch per op, captured into a CUDA graph).
//
// A plan is built from the model's shapes and the engine's choices
// (StepPlanConfig) and a bucket b in {1, 2, 4, 8, 16, 32} (engine.h). Its ops,
// in launch order, with the activation buffers they read and write (StepAct,
// the executor's StepBuffers) and the weights they read (StepParam of a layer,
// gpu_engine/device_weights.h):
//
//   embed_norm   x = E[token]; a = bf16(RMSNorm(x) g_attn[0])          rows b
//   for each layer l:
//     gemm qkv   qkv = a Wqkv^T                                      [b][q + 2 kv]
//                (fused norm: a = bf16(RMSNorm(x + y) g_attn[l]) computed in the gemv, x' = x + y)
//     rope_append  RoPE(q, k) in place; K/V -> the cache (BF16 + INT4 mirror)
//     attention  attn = attention(q, cache)                         [b][q]
//     gemm o     y = attn Wo^T (tensor parallel: summed over the ranks)
//     norm       x += y; a = bf16(RMSNorm(x) g_ffn[l])     (not with the fused norm)
//     gemm gate_up  gu = a Wgu^T                 (fused norm: from x + y, as the QKV gemm)
//     swiglu     sw = bf16(silu(g) u)            (not where the down GEMM stages it itself)
//     gemm down  y = sw Wdown^T                  (x_swiglu: from gu)
//     norm       x += y; a = bf16(RMSNorm(x) g_next)  (fused norm: only after the last layer)
//   lm_head      logits = a Wlm^T: cuBLASLt over kDecodeMaxRows rows (every bucket the same M),
//                or our streaming kernel over the bucket's rows (lm_head_streaming)
//   logits_reduce  per row: argmax, log-sum-exp, log p(target)
//   sample       per sampled row: the drawn token            (with GPU sampling)
//
// The configurations are the batch-invariant ones: every W4A16 GEMM's is
// cuda::linear_config(M = b, N, K, group) (its K split cuda::decode_splits of
// (N, K) alone), the attention's split count one for every bucket
// (cuda::attention_heuristic_invariant over kDecodeBuckets). Which kernels
// run follows from the bucket: at b <= 8 with fuse_norm (b = 1 without it) the
// projections but O run as the gemv kernel: the down GEMM's stages the SwiGLU
// itself (no swiglu op), the QKV and gate/up ones take the residual add +
// RMSNorm (no norm op but the first and the last; x alternates between the
// buffers x and x2); larger buckets run the skinny kernel and the separate
// norm and SwiGLU kernels.
//
// Building a plan needs no GPU (the heuristics are pure functions of the
// shapes, the SM count and, for the attention, its resident CTAs per SM,
// which the engine leaves to the device: 0): describe() prints it, one line
// per op. Each op carries its row of the breakdown (futr bench --breakdown,
// kBreakdownNames), and whether it may launch as a programmatic dependent of
// the op before (every op but the first and the cuBLASLt LM head); access()
// lists the buffers it reads and writes (its dependencies).
//
// Test: tests/gpu_engine/step_plan_test.cpp (no GPU: the op list of SmolLM2
// and Llama-3.1-8B shapes per bucket, their order, shapes and configurations).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "launch/decode_attention.h"
#include "launch/w4a16.h"
#include "model/model.h"

namespace futr::gpu {

inline constexpr int kDecodeMaxRows = 32;                                   // rows of one micro-step
inline constexpr std::array<int, 6> kDecodeBuckets = {1, 2, 4, 8, 16, 32};  // the buckets, each a plan
// The most shared memory the fused gemv of a bucket of several rows may take
// per CTA (its rows' x slices and scales): 4 CTAs still fit an SM.
inline constexpr size_t kGemvRowsSmem = 48 * 1024;

// What an op does (one launch each, plus the all-reduce of a tensor-parallel GEMM).
enum class StepOpKind : uint8_t {
  kEmbedNorm,
  kGemm,
  kRopeAppend,
  kAttention,
  kNorm,
  kSwiglu,
  kLmHead,
  kLogitsReduce,
  kSample
};
const char* to_string(StepOpKind k);

// The activation buffers of a micro-step (gpu_engine/launch_executor.h StepBuffers).
enum class StepAct : uint8_t { kNone, kX, kX2, kA, kQkv, kAttn, kY, kGu, kSw, kLogits, kRowStats, kSampled };
const char* to_string(StepAct a);

// The weights an op reads (of StepRef::layer where per layer; gpu_engine/device_weights.h).
enum class StepParam : uint8_t {
  kNone,
  kEmbd,
  kAttnNorm,
  kFfnNorm,
  kOutNorm,
  kQkv,
  kO,
  kGateUp,
  kDown,
  kLmHead
};
const char* to_string(StepParam p);
struct StepRef {
  StepParam param = StepParam::kNone;
  int layer = -1;  // the layer of a per-layer weight; -1: a model-wide one
};

// The row map the host writes before each micro-step ([kMapRows][kDecodeMaxRows]
// ints, one device block, the graphs' static input).
enum MapRow : int {
  kTok,     // token ids
  kPos,     // positions
  kBase,    // first slot of the row's sequence region (kv_cache.h)
  kLen,     // KV length the row attends (pos + 1)
  kRow,     // the row's index (its own slot base: the append's row_seq)
  kTarget,  // log-probability target, -1: none
  kMapRows
};

// The breakdown's rows (futr bench --breakdown; stats()["profile"]), in step order.
enum BreakdownRow : int {
  kBdEmbedNorm,
  kBdQkv,
  kBdRopeAppend,
  kBdAttention,
  kBdOProj,
  kBdNormAttn,
  kBdGateUp,
  kBdSwiglu,
  kBdDown,
  kBdNormFfn,
  kBdLmHead,
  kBdReduce,
  kBdSample,
  kBreakdownRows
};
extern const std::array<const char*, kBreakdownRows> kBreakdownNames;

// One operation of a plan.
struct StepOp {
  StepOpKind kind = StepOpKind::kGemm;
  int layer = -1;                  // the layer it belongs to (-1: before or after the layers)
  int rows = 0;                    // rows it computes: the bucket (the LM head: kDecodeMaxRows)
  StepRef w;                       // kGemm / kLmHead: the matrix; kEmbedNorm / kNorm: the RMSNorm gain
  StepAct in = StepAct::kNone;     // its input rows (kGemm: [rows][k] BF16; kRopeAppend: q|k|v in place)
  StepAct out = StepAct::kNone;    // its output rows
  StepAct x = StepAct::kNone;      // kEmbedNorm / kNorm: the FP32 residual [rows][H], in place;
                                   //   fused-norm kGemm: the residual read
  StepAct x_out = StepAct::kNone;  // fused-norm kGemm: where x + add is stored (the other residual buffer)
  StepAct add = StepAct::kNone;    // kNorm / fused-norm kGemm: the BF16 rows added to x first
  StepRef gain;                    // fused-norm kGemm: the RMSNorm gain
  int n = 0, k = 0;                // kGemm / kLmHead: output and input widths; kEmbedNorm / kNorm: n = H;
                     //   kSwiglu: n = I; kLogitsReduce: n = the logits' width; kSample: n = the drawable ids
  cuda::DecodeConfig gemm;    // kGemm: the configuration (pdl false; the executor sets it)
  bool x_swiglu = false;      // kGemm: the input is bf16(silu(g) u) of [rows][2k] gate|up
  bool norm_in = false;       // kGemm: the input is bf16(RMSNorm(x + add) gain) (the gemv, <= 8 rows)
  bool all_reduce = false;    // kGemm: the output summed over the tensor-parallel ranks
  bool lm_streaming = false;  // kLmHead: our streaming kernel (launch/lm_head.h), else cuBLASLt
  bool lm_int4 = false;       // kLmHead: the INT4 head (streaming)
  bool pdl = true;            // may launch as a programmatic dependent of the op before
  int breakdown = 0;          // its BreakdownRow
};

// The activations an op reads and writes, and the KV cache layer it writes
// (the append) or reads (the attention): the dependencies an executor that
// overlaps ops must keep. The row map, the samplers and the weights are
// read-only during a step and are not listed; buffers internal to one launch
// (split-K and attention workspaces and counters) neither.
struct StepAccess {
  std::vector<StepAct> reads, writes;
  int kv_read = -1, kv_write = -1;  // the cache layer (-1: none)
};
StepAccess access(const StepOp& op);

// What plans are built from.
struct StepPlanConfig {
  ModelConfig model;              // the shapes (a tensor-parallel rank's own)
  int lm_rows = 0;                // the LM head's vocabulary rows (logits width)
  int sampleable_vocab = 0;       // ids the GPU sampler may draw
  KvFormat kv = KvFormat::kBf16;  // bf16 | int4 | int4-rot
  int kv_block = 64;              // the Hadamard block (int4-rot)
  int ctx = 1;  // positions per sequence (the attention's longest: max(ctx, kDecodeMaxRows))
  bool fuse_norm =
      true;  // the residual add + RMSNorm in the QKV and gate/up gemv (buckets <= fuse_norm_rows)
  int fuse_norm_rows = cuda::kDecodeGemvMaxRows;  // the largest bucket fused (1..8)
  bool gpu_sampling = true;                       // a sample op after the reductions
  // The LM head by our streaming kernel (launch/lm_head.h) over the bucket's
  // rows, a programmatic dependent of the norm before it; false: cuBLASLt over
  // kDecodeMaxRows rows, a plain launch. Both batch invariant (ours by
  // construction: one summation order for any M).
  bool lm_head_streaming = false;
  bool lm_head_int4 = false;          // the streaming head over the INT4 rows (DeviceWeights::lm_head_int4)
  bool tensor_parallel = false;       // the O and down outputs all-reduced
  int sm_count = 1;                   // the GPU's multiprocessors (the heuristics' input)
  int attention_resident_per_sm = 0;  // the attention's resident CTAs per SM; 0: the device's (needs a GPU)
  bool attention_ctas = true;  // per bucket, the CTAs reducing a sequence's chunks (cuda::attention_ctas)
  struct Gemm {
    int n = 0, k = 0, group = 128;  // INT4 [n][k], scales per group of inputs
  };
  std::vector<std::array<Gemm, 4>> gemms;  // [layers] qkv, o, gate_up, down

  // The shapes of `c` with every projection in INT4 group 128 (64 where K % 128 != 0:
  // the synthetic models' rule).
  static std::vector<std::array<Gemm, 4>> default_gemms(const ModelConfig& c);
};

struct StepPlan {
  int bucket = 0;
  cuda::AttentionShape attention_shape;  // batch = bucket, max_len = max(ctx, kDecodeMaxRows)
  cuda::AttentionConfig attention;  // the same split count in every bucket; CTAs per sequence by the bucket
  bool fused_norm = false;          // the norms ride in the QKV and gate/up gemv
  bool swiglu_in_down = false;      // the down GEMM stages the SwiGLU
  std::vector<StepOp> ops;          // in launch order

  // One line per op: "L3 gemm qkv a -> qkv [1 x 1536 x 576] gemv tn=1 loads=4 splits=1 pdl".
  std::string describe() const;
  static std::string describe(const StepOp& op);
};

// The attention shape of a micro-step of `batch` rows.
cuda::AttentionShape decode_attention_shape(const StepPlanConfig& c, int batch);
// The attention's split count, one for every bucket (batch invariance).
cuda::AttentionConfig decode_attention_config(const StepPlanConfig& c);
// The plan of `bucket` rows (one of kDecodeBuckets).
StepPlan build_step_plan(const StepPlanConfig& c, int bucket);

}  // namespace futr::gpu
