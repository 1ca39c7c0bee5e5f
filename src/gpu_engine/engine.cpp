// The GPU engine's decode path (see engine.h).
#include "gpu_engine/engine.h"

#include "gpu_engine/nccl.h"
#include "gpu_engine/prefill.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/numeric.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/cublaslt.h"
#include "launch/decode_attention.h"
#include "launch/decode_ops.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/fp8_scaling.h"
#include "launch/linear.h"
#include "launch/stream.h"
#include "kernels/layout/kv_cache.cuh"
#include "model/projection.h"
#include "model/rope.h"
#include "quant/int4_pack.h"
#include "runtime/batch.h"
#include "runtime/perplexity.h"

namespace futr::gpu {

using runtime::BatchRow;
using runtime::RowOutput;
using runtime::SeqId;

namespace {

std::vector<uint16_t> to_bf16(const Tensor& t) {
  std::vector<uint16_t> out(size_t(t.numel()));
  const float* p = t.ptr();
  for (size_t i = 0; i < out.size(); ++i) out[i] = float_to_bf16(p[i]);
  return out;
}

// The logical INT4 rows of `parts` stacked into one [sum n, k] matrix, packed.
std::unique_ptr<cuda::W4Linear> fused(const quant::QuantizedWeights& q, const std::vector<ProjId>& ids) {
  quant::Int4Weights w;
  for (const ProjId& id : ids) {
    const std::string name = projection_name(id);
    const quant::QuantizedTensor& t = q.at(id);
    FUTR_CHECK(t.format == WeightFormat::kInt4, "GPU engine: {} is {}, not int4", name, to_string(t.format));
    const quant::Int4Weights& p = t.int4;
    if (w.n == 0) {
      w.k = p.k;
      w.group = p.group;
    }
    FUTR_CHECK(p.k == w.k && p.group == w.group, "GPU engine: {} (K {}, group {}) cannot be fused with K {}, group {}",
               name, p.k, p.group, w.k, w.group);
    w.n += p.n;
    w.q.insert(w.q.end(), p.q.begin(), p.q.end());
    w.scale.insert(w.scale.end(), p.scale.begin(), p.scale.end());
  }
  const quant::Int4Packed packed = quant::pack_int4(w);
  return std::make_unique<cuda::W4Linear>(w.n, w.k, w.group, packed.weights, packed.scales,
                                          GpuEngine::kMaxMicroBatch);
}

// A random INT4 layer drawn on the device: nibbles uniform over 0..15 (values
// -8..7, standard deviation ~4.6) and FP16 group scales around
// 1 / (4.6 sqrt(K)), so y = x W^T has about x's RMS for any K: the residual
// stream of a synthetic model stays O(1) over 80 layers (no overflow, no NaN).
std::unique_ptr<cuda::W4Linear> synthetic_linear(int n, int k, uint64_t seed, cudaStream_t s) {
  const int group = k % 128 == 0 ? 128 : 64;
  FUTR_CHECK(k % group == 0, "synthetic model: K {} is not a multiple of 64", k);
  auto w = std::make_unique<cuda::W4Linear>(n, k, group, GpuEngine::kMaxMicroBatch);
  cuda::fill_random(w->weights(), cuda::FillType::kU8, uint64_t(w->weight_bytes() - w->scale_bytes()), seed, 0, 0, s);
  const float s0 = 1.0f / (4.6f * std::sqrt(float(k)));
  cuda::fill_random(w->scales(), cuda::FillType::kF16, uint64_t(w->scale_bytes() / 2), seed + 1, 0.5f * s0, 1.5f * s0,
                    s);
  return w;
}

// Pinned host memory (the copies around a graph launch are asynchronous only
// from page-locked memory).
template <class T>
class Pinned {
 public:
  Pinned() = default;
  explicit Pinned(size_t n) : n_(n) {
    FUTR_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)));
  }
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  Pinned(Pinned&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Pinned& operator=(Pinned&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// The row map's arrays in `ints` ([kMapRows][kMaxMicroBatch]).
enum MapRow : int { kTok, kPos, kBase, kLen, kRow, kTarget, kMapRows };

bool disabled_by_env(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

// The kinds of launch of a micro-step, in step order (the profile's rows).
enum Op : int { kEmbedNorm, kQkv, kRopeAppend, kAttention, kOProj, kNormAttn, kGateUp, kSwiglu, kDown, kNormFfn,
                kLmHead, kReduce, kSample, kOps };
constexpr const char* kOpNames[kOps] = {"embedding + rmsnorm", "qkv gemm", "rope + kv append", "attention", "o gemm",
                                        "residual + rmsnorm (attn)", "gate_up gemm", "swiglu", "down gemm (+ swiglu at M = 1)",
                                        "residual + rmsnorm (ffn)", "lm head (cublaslt)", "logits reduce", "sampling"};

// Events after each launch of a profiled micro-step (GpuEngine::set_profiling).
struct Profiler {
  std::vector<cudaEvent_t> events;  // [0]: the start; [i + 1]: after launch i
  std::vector<int> ops;             // [launches] Op of launch i
  std::array<double, kOps> us{};    // summed over the profiled micro-steps
  std::array<int64_t, kOps> calls{};
  int64_t micro_steps = 0;
  double step_us = 0;               // start to last event, summed
  ~Profiler() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  void begin(cudaStream_t st) {
    ops.clear();
    record(st);
  }
  void mark(Op op, cudaStream_t st) {
    ops.push_back(op);
    record(st);
  }
  void record(cudaStream_t st) {
    const size_t i = ops.size();
    if (i >= events.size()) {
      cudaEvent_t e;
      FUTR_CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
    }
    // External: inside a stream capture this becomes an event record node of the
    // graph (a plain record would only be a capture-internal dependency).
    FUTR_CUDA_CHECK(cudaEventRecordWithFlags(events[i], st, cudaEventRecordExternal));
  }
  void accumulate() {  // after the stream synchronized
    for (size_t i = 0; i < ops.size(); ++i) {
      float ms = 0;
      FUTR_CUDA_CHECK(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
      us[size_t(ops[i])] += 1e3 * ms;
      ++calls[size_t(ops[i])];
    }
    float ms = 0;
    FUTR_CUDA_CHECK(cudaEventElapsedTime(&ms, events[0], events[ops.size()]));
    step_us += 1e3 * ms;
    ++micro_steps;
  }
};

}  // namespace

// ---- device state -------------------------------------------------------------------
struct GpuEngine::Impl {
  struct Layer {
    cuda::DeviceBuffer<uint16_t> attn_norm, ffn_norm;  // [H] BF16
    std::unique_ptr<cuda::W4Linear> qkv, o, gate_up, down;
    cuda::DeviceBuffer<uint16_t> k, v;   // [slots][kv_heads][D] BF16
    cuda::DeviceBuffer<uint8_t> k4, v4;  // INT4 mirror (int4, int4-rot)
    cuda::DeviceBuffer<float> ks, vs;
    cuda::KvLayerPtrs ptrs(int num_slots) {
      return {k.get(), v.get(), k4.get(), v4.get(), ks.get(), vs.get(), num_slots};
    }
  };
  cuda::Stream stream;
  cuda::CublasLt lt;
  cuda::DeviceBuffer<uint16_t> embd;      // [vocab][H] BF16
  cuda::DeviceBuffer<uint16_t> lm_head;   // [vocab][H] BF16 (empty when tied: embd)
  cuda::DeviceBuffer<uint16_t> out_norm;  // [H]
  cuda::DeviceBuffer<float> rope_cos, rope_sin;  // [max(ctx, 32)][D/2]
  std::vector<Layer> layers;
  // Activations of one micro-step (kMaxMicroBatch rows).
  cuda::DeviceBuffer<float> x;        // [B][H] FP32 residual
  cuda::DeviceBuffer<float> x2;       // [1][H] the residual's other buffer (fuse_norm, one-row micro-steps)
  cuda::DeviceBuffer<uint16_t> a;     // [B][H] BF16 GEMM input
  cuda::DeviceBuffer<uint16_t> qkv;   // [B][q + 2 kv]
  cuda::DeviceBuffer<uint16_t> attn;  // [B][q]
  cuda::DeviceBuffer<uint16_t> y;     // [B][H]
  cuda::DeviceBuffer<uint16_t> gu;    // [B][2I]
  cuda::DeviceBuffer<uint16_t> sw;    // [B][I]
  cuda::DeviceBuffer<float> logits;   // [B][vocab]
  cuda::DeviceBuffer<int> ints;       // [kMapRows][B]: the row map (MapRow), the graphs' static input
  cuda::DeviceBuffer<cuda::LogitsRowStats> row_stats;  // [B] the reductions' output
  cuda::DeviceBuffer<cuda::SampleRow> samplers;        // [B] the rows' GPU samplers (top_k 0: none), static input
  cuda::DeviceBuffer<int> sampled;                     // [B] sample_topk's tokens
  cuda::DeviceBuffer<int> nonfinite;  // [1] append's count of non-finite K/V rows
  cuda::DeviceBuffer<float> attn_ws;
  cuda::DeviceBuffer<int> attn_counters;
  // The attention's split count, one for every bucket (batch invariance:
  // cuda::attention_heuristic_invariant); per bucket, the CTAs that reduce a
  // sequence's chunks (cuda::attention_ctas: the same bits, fewer CTAs at
  // large batch).
  cuda::AttentionConfig attn_cfg;
  std::array<cuda::AttentionConfig, kBuckets.size()> attn_bucket_cfg;
  // Host side of the copies around a micro-step (pinned).
  Pinned<int> h_ints;                          // [kMapRows][B]
  Pinned<cuda::LogitsRowStats> h_stats;        // [B]
  Pinned<cuda::SampleRow> h_samplers;          // [B]
  Pinned<int> h_sampled;                       // [B]
  Pinned<float> h_logits;                      // [B][vocab] (only the rows asked for are written)
  Pinned<int> h_nonfinite;                     // [1]
  // One graph per bucket (kBuckets order); warm: the bucket ran eagerly once.
  std::array<cuda::Graph, kBuckets.size()> graphs;
  std::array<bool, kBuckets.size()> warm{};
  int last_bucket = 0;                         // the bucket of the last micro-step
  int num_slots = 0, slots_per_seq = 0;
  int scratch_base = 0;                        // first slot of the padding rows' scratch region
  size_t kv_bytes = 0, weight_bytes = 0;
  int64_t micro_steps = 0, graph_launches = 0, logits_rows_copied = 0, host_sampled = 0, gpu_sampled = 0;
  std::unique_ptr<Profiler> prof;              // set while profiling (set_profiling)
  std::unique_ptr<PrefillPath> prefill;        // the FP8 prefill path (null: prompts through the decode step)
  // Delayed FP8 scaling: each sequence slot's own scale state (null until its first prompt chunk).
  std::vector<std::unique_ptr<cuda::DeviceScaleBank>> seq_banks;
  int64_t prefill_output_rows = 0;
  double prefill_ms = 0;                       // host wall time of the prefill chunks (incl. their outputs)
  double fp8_calibration_ms = 0;               // the device calibration at construction (0: none)
  int64_t fp8_calibration_tokens = 0;
};

size_t GpuEngine::bucket_index(int bucket) {
  const size_t k = size_t(std::find(kBuckets.begin(), kBuckets.end(), bucket) - kBuckets.begin());
  FUTR_ASSERT(k < kBuckets.size());
  return k;
}

int GpuEngine::bucket_of(int rows) {
  FUTR_ASSERT(rows >= 1 && rows <= kMaxMicroBatch);
  for (int b : kBuckets)
    if (b >= rows) return b;
  return kMaxMicroBatch;
}

GpuEngine::GpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                     const GpuEngineOptions& o)
    : config_(o.rank_config ? *o.rank_config : model.config), sampleable_vocab_(model.sampleable_vocab()), opt_(o),
      impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = config_;
  FUTR_CHECK(q && q->format == WeightFormat::kInt4,
             "GPU engine: runs INT4 weights (--weights int4, or a .futr file with INT4 weights)");
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const auto t0 = Clock::now();
  size_t weights_est = 0;
  for (const auto& [name, t] : q->tensors) weights_est += size_t(t.n) * t.k / 2 + size_t(t.n) * (t.k / t.int4.group) * 2;
  weights_est += size_t(c.vocab) * c.hidden * 2 * (c.tied_embeddings ? 1 : 2);
  init(fmt::format("int4 weights ({})", q->method), weights_est);
  const auto t1 = Clock::now();

  // ---- weights --------------------------------------------------------------------
  Impl& m = *impl_;
  m.embd = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.tok_embd));
  if (!model.weights.lm_head.empty()) {  // the rows [lm_begin_, lm_begin_ + lm_rows_) (all without TP)
    const Tensor& h = model.weights.lm_head;
    std::vector<uint16_t> rows(size_t(lm_rows_) * size_t(c.hidden));
    const float* src = h.ptr() + size_t(lm_begin_) * size_t(c.hidden);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = float_to_bf16(src[i]);
    m.lm_head = cuda::DeviceBuffer<uint16_t>(rows);
  }
  m.out_norm = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.out_norm));
  for (int l = 0; l < c.n_layers; ++l) {
    Impl::Layer& L = m.layers[size_t(l)];
    std::vector<ProjId> n;  // q k v o gate up down
    for (Projection p : kLayerProjections) n.push_back({l, p});
    L.attn_norm = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.layers[size_t(l)].attn_norm));
    L.ffn_norm = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.layers[size_t(l)].ffn_norm));
    L.qkv = fused(*q, {n[0], n[1], n[2]});
    L.o = fused(*q, {n[3]});
    L.gate_up = fused(*q, {n[4], n[5]});
    L.down = fused(*q, {n[6]});
    m.weight_bytes += L.qkv->weight_bytes() + L.o->weight_bytes() + L.gate_up->weight_bytes() + L.down->weight_bytes();
  }
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  const auto t2 = Clock::now();
  init_prefill();
  const auto t3 = Clock::now();
  if (opt_.log)
    opt_.log(fmt::format("gpu engine ready in {:.2f} s (device and buffers {:.2f} s, weights to the GPU {:.2f} s, "
                         "prefill path {:.2f} s{})",
                         secs(t0, t3), secs(t0, t1), secs(t1, t2), secs(t2, t3),
                         m.fp8_calibration_ms > 0 ? fmt::format(" of which FP8 calibration {:.0f} ms",
                                                                 m.fp8_calibration_ms)
                                                  : std::string()));
}

GpuEngine::GpuEngine(const ModelConfig& config, uint64_t seed, const GpuEngineOptions& o)
    : config_(config), sampleable_vocab_(config.vocab), opt_(o), impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = config_;
  c.validate("synthetic model");
  const size_t per_layer = size_t(c.q_dim() + 2 * c.kv_dim()) * c.hidden + size_t(c.hidden) * c.q_dim() +
                           size_t(3) * c.intermediate * c.hidden;
  const size_t weights_est = size_t(c.n_layers) * per_layer * 17 / 32 +  // nibbles + FP16 scales per 128
                             size_t(c.vocab) * c.hidden * 2 * (c.tied_embeddings ? 1 : 2);
  init(fmt::format("synthetic int4 weights (seed {})", seed), weights_est);

  // ---- weights, drawn on the device ------------------------------------------------
  Impl& m = *impl_;
  cudaStream_t st = m.stream;
  const int H = c.hidden;
  uint64_t sd = seed * 0x9e3779b97f4a7c15ull + 17;
  auto next = [&] { return sd += 0x632be59bd9b4e019ull; };
  auto bf16 = [&](size_t n, float lo, float hi) {
    cuda::DeviceBuffer<uint16_t> b(n);
    cuda::fill_random(b.get(), cuda::FillType::kBF16, n, next(), lo, hi, st);
    return b;
  };
  m.embd = bf16(size_t(c.vocab) * H, -1.0f, 1.0f);
  // The head's rows of RMS ~1/sqrt(H) give logits of RMS ~1 for normalized inputs.
  const float head = std::sqrt(3.0f / float(H));
  if (!c.tied_embeddings) {
    m.lm_head = bf16(size_t(c.vocab) * H, -head, head);  // the whole head: every rank draws the same one
    if (lm_rows_ < c.vocab) {                             // then keeps its rows [lm_begin_, + lm_rows_)
      cuda::DeviceBuffer<uint16_t> rows(size_t(lm_rows_) * H);
      FUTR_CUDA_CHECK(cudaMemcpyAsync(rows.get(), m.lm_head.get() + size_t(lm_begin_) * H,
                                      rows.size() * sizeof(uint16_t), cudaMemcpyDeviceToDevice, st));
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
      m.lm_head = std::move(rows);
    }
  }
  m.out_norm = bf16(size_t(H), 0.8f, 1.2f);
  for (int l = 0; l < c.n_layers; ++l) {
    Impl::Layer& L = m.layers[size_t(l)];
    L.attn_norm = bf16(size_t(H), 0.8f, 1.2f);
    L.ffn_norm = bf16(size_t(H), 0.8f, 1.2f);
    L.qkv = synthetic_linear(c.q_dim() + 2 * c.kv_dim(), H, next(), st);
    L.o = synthetic_linear(H, c.q_dim(), next(), st);
    L.gate_up = synthetic_linear(2 * c.intermediate, H, next(), st);
    L.down = synthetic_linear(H, c.intermediate, next(), st);
    m.weight_bytes += L.qkv->weight_bytes() + L.o->weight_bytes() + L.gate_up->weight_bytes() + L.down->weight_bytes();
  }
  FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  FUTR_CUDA_CHECK(cudaGetLastError());
  init_prefill();
}

void GpuEngine::init_prefill() {
  Impl& m = *impl_;
  const bool want = opt_.prefill_fp8 || opt_.prefill_synthetic;
  if (!want) {
    info_.describe += "; prompts through the decode step";
    return;
  }
  FUTR_CHECK(!opt_.tp_comms, "GPU engine: the FP8 prefill path does not run tensor parallel yet (--prefill=off)");
  const int rows = std::min(opt_.prefill_rows, std::max(opt_.max_step_tokens, 1));
  if (opt_.prefill_fp8)
    m.prefill = std::make_unique<PrefillPath>(config_, *opt_.prefill_fp8, opt_.fp8, rows, m.stream);
  else
    m.prefill = std::make_unique<PrefillPath>(config_, opt_.prefill_seed, opt_.fp8, rows, m.stream);
  m.weight_bytes += m.prefill->weight_bytes();
  // Warm-up: one 16-row chunk into the padding rows' scratch slots and its
  // output pass (the kernels' modules load on first launch, cuBLASLt makes its
  // M = 1 plan), so the first prompt's time to first token is the prefill's
  // own; then the delayed-scaling state back to fresh (the warm-up's amax
  // must not enter any window).
  {
    static_assert(kMaxMicroBatch >= 16, "the warm-up chunk fits the scratch region");
    const int n = std::min(16, m.prefill->max_rows());
    const std::vector<int32_t> tokens(static_cast<size_t>(n), 0);
    const PrefillPath::Request req{n, 0, m.scratch_base};
    std::vector<cuda::KvLayerPtrs> caches;
    m.prefill->run(tokens, std::span<const PrefillPath::Request>(&req, 1), prefill_shared(caches), m.stream);
    m.h_ints[kTok * kMaxMicroBatch] = n - 1;
    m.h_ints[kTarget * kMaxMicroBatch] = -1;
    enqueue_prefill_outputs(1);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    m.prefill->reset_state(m.stream);
    m.nonfinite.fill_bytes(0, m.stream);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  }
  // Static scales from the device when the weights came without stored amax
  // (quantized on load): the calibration windows run in sequence slot 0's
  // region (no sequence is open yet; its rows are overwritten before any read).
  if (!opt_.fp8_calibration.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<cuda::KvLayerPtrs> caches;
    const int window = std::max(1, std::min(opt_.fp8_calibration_window, m.slots_per_seq));
    m.prefill->calibrate(opt_.fp8_calibration, window, 0, prefill_shared(caches), m.stream);
    m.nonfinite.fill_bytes(0, m.stream);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    m.fp8_calibration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    m.fp8_calibration_tokens = int64_t(opt_.fp8_calibration.size());
    opt_.fp8_calibration.clear();
    opt_.fp8_calibration.shrink_to_fit();
  }
  info_.describe += fmt::format("; prompts: the FP8 prefill path (chunks of <= {} rows, {:.1f} MiB of FP8 weights, "
                                "{} FP8 scales{})",
                                rows, double(m.prefill->weight_bytes()) / (1 << 20), to_string(m.prefill->scaling()),
                                m.prefill->scaling() == Fp8Scaling::kDelayed ? " per request" : "");
}

void GpuEngine::init(const std::string& weights_what, size_t weights_est) {
  const ModelConfig& c = config_;
  const GpuEngineOptions& o = opt_;
  const cuda::DeviceInfo& dev = cuda::require_device();
  lm_begin_ = o.lm_rows > 0 ? o.lm_begin : 0;
  lm_rows_ = o.lm_rows > 0 ? o.lm_rows : c.vocab;
  FUTR_CHECK(lm_begin_ >= 0 && lm_rows_ >= 1 && int64_t(lm_begin_) + lm_rows_ <= c.vocab,
             "GPU engine: LM head rows [{}, {}) outside the vocabulary of {}", lm_begin_, int64_t(lm_begin_) + lm_rows_,
             c.vocab);
  if (o.tp_comms) {
    opt_.gpu_sampling = false;  // the TP engine samples from the gathered logits
    FUTR_CHECK(o.tp_rank >= 0 && o.tp_rank < o.tp_comms->size(), "GPU engine: rank {} of {}", o.tp_rank,
               o.tp_comms->size());
  }
  FUTR_CHECK(o.kv == KvFormat::kBf16 || o.kv == KvFormat::kInt4 || o.kv == KvFormat::kInt4Rot,
             "GPU engine: KV cache {} is not supported (bf16, int4, int4-rot)", to_string(o.kv));
  FUTR_CHECK(o.max_seqs >= 1 && o.max_seqs <= 4096, "the maximum number of sequences must be in 1..4096 (got {})",
             o.max_seqs);
  FUTR_CHECK(o.max_step_tokens >= 1 && o.max_step_tokens <= (1 << 20),
             "the maximum tokens per step must be in 1..1048576 (got {})", o.max_step_tokens);
  FUTR_CHECK(c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0, "GPU engine: {} heads over {} KV heads", c.n_heads,
             c.n_kv_heads);
  opt_.ctx = o.ctx > 0 ? o.ctx : c.max_context;
  FUTR_CHECK(opt_.ctx >= 1 && opt_.ctx <= (1 << 22), "--ctx {} out of range 1..4194304", opt_.ctx);
  if (disabled_by_env("FUTR_GPU_GRAPHS")) opt_.graphs = false;
  if (disabled_by_env("FUTR_GPU_SAMPLING")) opt_.gpu_sampling = false;
  if (disabled_by_env("FUTR_GPU_PDL")) opt_.pdl = false;
  if (disabled_by_env("FUTR_GPU_FUSE_NORM")) opt_.fuse_norm = false;
  if (disabled_by_env("FUTR_GPU_ATTN_CTAS")) opt_.attn_ctas = false;
  const bool int4 = o.kv != KvFormat::kBf16;
  const int rot = o.kv == KvFormat::kInt4Rot ? o.kv_block : 0;
  // Refuse what the kernels do not compile before allocating anything. The
  // longest length a launch sees: ctx, or a padding row's 32 (engine.h).
  cuda::AttentionShape shape{1, c.n_kv_heads, c.n_heads / c.n_kv_heads, c.head_dim, int4, rot,
                             std::max(opt_.ctx, kMaxMicroBatch)};
  cuda::attention_heuristic(shape, dev.sm_count);

  Impl& m = *impl_;
  const int H = c.hidden, D = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), I = c.intermediate;
  const int B = kMaxMicroBatch;

  // ---- KV cache: does it fit? ----------------------------------------------------
  m.slots_per_seq = (opt_.ctx + layout::kKvSlotAlign - 1) / layout::kKvSlotAlign * layout::kKvSlotAlign;
  const int64_t seq_slots = int64_t(m.slots_per_seq) * o.max_seqs;
  FUTR_CHECK(seq_slots + B <= (int64_t(1) << 30), "GPU engine: {} sequences x ctx {} = {} KV slots, more than the "
             "cache addresses (2^30); what fits: fewer sequences or a smaller --ctx", o.max_seqs, opt_.ctx, seq_slots);
  // The padding rows' scratch region (engine.h): kMaxMicroBatch slots past every sequence's.
  m.scratch_base = int(seq_slots);
  m.num_slots = int(seq_slots) + B;
  static_assert(kMaxMicroBatch % layout::kKvSlotAlign == 0, "the scratch region keeps num_slots a multiple of 16");
  const size_t per_slot = size_t(c.n_layers) * c.n_kv_heads *
                          (size_t(D) * 2 * 2 + (int4 ? size_t(D) + 8 : 0));  // BF16 K+V, + nibbles and scales
  m.kv_bytes = per_slot * size_t(m.num_slots);
  size_t free_b = 0, total_b = 0;
  FUTR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t reserve = size_t(1) << 30;  // activations, workspaces, cuBLASLt, the CUDA context
  if (m.kv_bytes + weights_est + reserve > free_b) {
    const size_t room = free_b > weights_est + reserve ? free_b - weights_est - reserve : 0;
    const long fit_seqs = long(room / (per_slot * size_t(m.slots_per_seq)));
    const long fit_ctx = long(room / (per_slot * size_t(o.max_seqs))) / 16 * 16;
    fail("GPU engine: the KV cache for {} sequences x ctx {} needs {:.1f} GiB, but {:.1f} GiB of GPU memory are "
         "free after the weights ({:.1f} GiB); what fits: {} sequences at ctx {}, or ctx {} for {} sequences",
         o.max_seqs, opt_.ctx, double(m.kv_bytes) / (1ull << 30), double(free_b) / (1ull << 30),
         double(weights_est) / (1ull << 30), fit_seqs, opt_.ctx, fit_ctx, o.max_seqs);
  }

  m.layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    Impl::Layer& L = m.layers[size_t(l)];
    const size_t e = size_t(m.num_slots) * c.n_kv_heads * D;
    L.k = cuda::DeviceBuffer<uint16_t>(e);
    L.v = cuda::DeviceBuffer<uint16_t>(e);
    L.k.fill_bytes(0);
    L.v.fill_bytes(0);
    if (int4) {
      const size_t nb = layout::kv_nibble_bytes(c.n_kv_heads, D, m.num_slots);
      L.k4 = cuda::DeviceBuffer<uint8_t>(nb);
      L.v4 = cuda::DeviceBuffer<uint8_t>(nb);
      L.ks = cuda::DeviceBuffer<float>(size_t(m.num_slots) * c.n_kv_heads);
      L.vs = cuda::DeviceBuffer<float>(size_t(m.num_slots) * c.n_kv_heads);
      L.k4.fill_bytes(0x88);  // nibbles 8: zeros
      L.v4.fill_bytes(0x88);
      L.ks.fill_bytes(0);
      L.vs.fill_bytes(0);
    }
  }
  // Positions [0, 32) exist even for ctx < 32: the padding rows use them.
  const RopeTable rope = make_rope_table(D, c.rope_theta, c.rope_scaling, std::max(opt_.ctx, B));
  m.rope_cos = cuda::DeviceBuffer<float>(rope.cos);
  m.rope_sin = cuda::DeviceBuffer<float>(rope.sin);

  // ---- activations and workspaces --------------------------------------------------
  m.x = cuda::DeviceBuffer<float>(size_t(B) * H);
  m.x2 = cuda::DeviceBuffer<float>(size_t(H));
  m.a = cuda::DeviceBuffer<uint16_t>(size_t(B) * H);
  m.a.fill_bytes(0);  // the LM head reads all kMaxMicroBatch rows (enqueue)
  m.qkv = cuda::DeviceBuffer<uint16_t>(size_t(B) * (q_dim + 2 * kv_dim));
  m.attn = cuda::DeviceBuffer<uint16_t>(size_t(B) * q_dim);
  m.y = cuda::DeviceBuffer<uint16_t>(size_t(B) * H);
  m.gu = cuda::DeviceBuffer<uint16_t>(size_t(B) * 2 * I);
  m.sw = cuda::DeviceBuffer<uint16_t>(size_t(B) * I);
  m.logits = cuda::DeviceBuffer<float>(size_t(B) * size_t(lm_rows_));
  m.ints = cuda::DeviceBuffer<int>(size_t(kMapRows) * B);
  m.row_stats = cuda::DeviceBuffer<cuda::LogitsRowStats>(size_t(B));
  m.samplers = cuda::DeviceBuffer<cuda::SampleRow>(size_t(B));
  m.samplers.fill_bytes(0);
  m.sampled = cuda::DeviceBuffer<int>(size_t(B));
  m.nonfinite = cuda::DeviceBuffer<int>(1);
  m.nonfinite.fill_bytes(0);
  m.attn_cfg = cuda::attention_heuristic_invariant(shape, dev.sm_count, kBuckets);
  for (size_t k = 0; k < kBuckets.size(); ++k) {
    cuda::AttentionShape sb = shape;
    sb.batch = kBuckets[k];
    m.attn_bucket_cfg[k] = opt_.attn_ctas ? cuda::attention_ctas(sb, m.attn_cfg.splits, dev.sm_count) : m.attn_cfg;
  }
  shape.batch = B;
  m.attn_ws = cuda::DeviceBuffer<float>(std::max<size_t>(1, cuda::attention_workspace_floats(shape, m.attn_cfg)));
  m.attn_counters = cuda::DeviceBuffer<int>(cuda::attention_counters(shape));
  m.attn_counters.fill_bytes(0);
  m.h_ints = Pinned<int>(size_t(kMapRows) * B);
  m.h_stats = Pinned<cuda::LogitsRowStats>(size_t(B));
  m.h_samplers = Pinned<cuda::SampleRow>(size_t(B));
  m.h_sampled = Pinned<int>(size_t(B));
  m.h_logits = Pinned<float>(size_t(B) * size_t(lm_rows_));
  m.h_nonfinite = Pinned<int>(1);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());

  table_ = runtime::SequenceTable(o.max_seqs, opt_.ctx);
  info_.name = "gpu";
  info_.describe = fmt::format(
      "gpu ({}, {} SMs; {}, KV {}{} {:.1f} MiB, ctx {} x {} sequences; {}, {}; decode micro-steps of up to {} "
      "rows)",
      dev.name, dev.sm_count, weights_what, to_string(o.kv), rot ? fmt::format(" (Hadamard block {})", rot) : "",
      double(m.kv_bytes) / (1 << 20), opt_.ctx, o.max_seqs,
      opt_.graphs ? "CUDA graphs per batch bucket" : "eager launches (graphs off)",
      opt_.pdl ? "programmatic dependent launch" : "no PDL", kMaxMicroBatch);
  info_.vocab = c.vocab;
  info_.ctx = opt_.ctx;
  info_.max_seqs = o.max_seqs;
  info_.max_step_tokens = o.max_step_tokens;
  info_.weights = WeightFormat::kInt4;
  info_.kv = o.kv;
}

GpuEngine::~GpuEngine() = default;

void GpuEngine::open(SeqId id, const runtime::SamplerConfig& sampling) {
  const int s = table_.open(id, sampling);
  table_.sampler(s).limit_vocab(sampleable_vocab_);  // padded LM-head rows are never drawn
  // Delayed FP8 scaling: the sequence starts from a fresh state (no request sees another's history).
  Impl& m = *impl_;
  if (size_t(s) < m.seq_banks.size() && m.seq_banks[size_t(s)]) m.seq_banks[size_t(s)]->reset(m.stream);
}

cuda::DeviceScaleBank* GpuEngine::seq_bank(int slot) {
  Impl& m = *impl_;
  if (m.seq_banks.size() <= size_t(slot)) m.seq_banks.resize(size_t(slot) + 1);
  if (!m.seq_banks[size_t(slot)]) m.seq_banks[size_t(slot)] = m.prefill->new_bank();
  return m.seq_banks[size_t(slot)].get();
}

// The cache rows past len are overwritten before they are read again (attention masks t >= len).
void GpuEngine::truncate(SeqId id, int len) { table_.truncate(id, len); }

void GpuEngine::close(SeqId id) { table_.close(id); }

void GpuEngine::enqueue(int bucket, cudaStream_t st) {
  Impl& m = *impl_;
  const ModelConfig& c = config_;
  const int B = bucket, Bm = kMaxMicroBatch;
  const int H = c.hidden, D = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), I = c.intermediate;
  const int qkv_n = q_dim + 2 * kv_dim;
  const int* d_tok = m.ints.get() + kTok * Bm;
  const int* d_pos = m.ints.get() + kPos * Bm;
  const int* d_base = m.ints.get() + kBase * Bm;
  const int* d_len = m.ints.get() + kLen * Bm;
  const int* d_row = m.ints.get() + kRow * Bm;
  const int* d_target = m.ints.get() + kTarget * Bm;
  const bool int4 = opt_.kv != KvFormat::kBf16;
  const int rot = opt_.kv == KvFormat::kInt4Rot ? opt_.kv_block : 0;
  // PDL for every kernel but the first (engine.h); a profiled step launches
  // one by one with an event after each (set_profiling).
  const bool pdl = opt_.pdl && !m.prof;
  Profiler* const prof = m.prof.get();
  auto mark = [&](Op op) {
    if (prof) prof->mark(op, st);
  };
  auto gemm = [&](const cuda::W4Linear& w, const void* x, void* y, bool x_swiglu = false) {
    cuda::DecodeConfig cfg = w.config(B);
    cfg.pdl = pdl;
    w.forward(x, y, B, cfg, st, x_swiglu);
  };
  // The gemv (M = 1) and sk (M <= 8) kernels take the SwiGLU into the down
  // projection's input staging (same bits as the separate kernel; one launch less).
  const cuda::DecodeKernel down_kernel = m.layers[0].down->config(B).kernel;
  const bool swiglu_in_down = down_kernel == cuda::DecodeKernel::kGemv || down_kernel == cuda::DecodeKernel::kStreamK;
  // One-row micro-steps with fuse_norm: the residual + RMSNorm in the QKV and
  // gate/up gemv (engine.h); x alternates between m.x and m.x2 (xr: current).
  const bool fuse = opt_.fuse_norm && B == 1 && H <= cuda::kDecodeNormMaxK &&
                    m.layers[0].qkv->config(1).kernel == cuda::DecodeKernel::kGemv &&
                    m.layers[0].gate_up->config(1).kernel == cuda::DecodeKernel::kGemv;
  float* xr = m.x.get();
  float* xo = m.x2.get();
  auto gemm_norm = [&](const cuda::W4Linear& w, const uint16_t* gain, void* y) {
    cuda::DecodeConfig cfg = w.config(B);
    cfg.pdl = pdl;
    const cuda::DecodeNormInput n{xr, m.y.get(), gain, xo, c.rms_eps};
    w.forward(nullptr, y, B, cfg, st, false, &n);
    std::swap(xr, xo);
  };
  if (prof) prof->begin(st);

  cuda::RmsNormArgs norm;
  norm.x = m.x.get();
  norm.out = m.a.get();
  norm.rows = B;
  norm.H = H;
  norm.eps = c.rms_eps;
  // x = E[token]; a = RMSNorm(x) g_attn[0]
  norm.tokens = d_tok;
  norm.embd = m.embd.get();
  norm.gain = m.layers[0].attn_norm.get();
  cuda::rmsnorm(norm, st);  // the first kernel: after the host's copy of the row map
  mark(kEmbedNorm);
  norm.tokens = nullptr;
  norm.add = m.y.get();
  norm.ld_add = H;

  const cuda::AttentionShape shape{B, c.n_kv_heads, c.n_heads / c.n_kv_heads, D, int4, rot,
                                   std::max(opt_.ctx, kMaxMicroBatch)};
  for (int l = 0; l < c.n_layers; ++l) {
    Impl::Layer& L = m.layers[size_t(l)];
    const cuda::KvLayerPtrs cache = L.ptrs(m.num_slots);
    if (fuse && l > 0) gemm_norm(*L.qkv, L.attn_norm.get(), m.qkv.get());  // x += down; RMSNorm g_attn
    else gemm(*L.qkv, m.a.get(), m.qkv.get());
    mark(kQkv);
    // RoPE of q and k fused into the append (bit-identical to cuda::rope + kv_append).
    cuda::KvAppendArgs ap;
    ap.k = m.qkv.get() + q_dim;
    ap.v = m.qkv.get() + q_dim + kv_dim;
    ap.ld = qkv_n;
    ap.row_seq = d_row;
    ap.row_pos = d_pos;
    ap.slot_base = d_base;
    ap.cache = cache;
    ap.rows = B;
    ap.kv_heads = c.n_kv_heads;
    ap.head_dim = D;
    ap.mirror = int4;
    ap.rot_block = rot;
    ap.nonfinite = m.nonfinite.get();
    ap.rope_cos = m.rope_cos.get();
    ap.rope_sin = m.rope_sin.get();
    ap.q = m.qkv.get();
    ap.q_heads = c.n_heads;
    cuda::kv_append(ap, st, pdl);
    mark(kRopeAppend);
    cuda::AttentionArgs aa{m.qkv.get(), m.attn.get(), d_base, d_len, cache, m.attn_ws.get(), m.attn_ws.size(),
                           m.attn_counters.get(), m.attn_counters.size(), qkv_n};
    cuda::decode_attention(shape, aa, m.attn_bucket_cfg[bucket_index(B)], st, pdl);
    mark(kAttention);
    gemm(*L.o, m.attn.get(), m.y.get());
    if (opt_.tp_comms) opt_.tp_comms->all_reduce_bf16(m.y.get(), size_t(B) * size_t(H), opt_.tp_rank, st);
    mark(kOProj);
    if (fuse) {
      gemm_norm(*L.gate_up, L.ffn_norm.get(), m.gu.get());  // x += o; RMSNorm g_ffn
    } else {
      norm.gain = L.ffn_norm.get();
      cuda::rmsnorm(norm, st, pdl);  // x += o; a = RMSNorm(x) g_ffn
      mark(kNormAttn);
      gemm(*L.gate_up, m.a.get(), m.gu.get());
    }
    mark(kGateUp);
    if (swiglu_in_down) {
      gemm(*L.down, m.gu.get(), m.y.get(), true);
    } else {
      cuda::swiglu(m.gu.get(), m.sw.get(), B, I, st, pdl);
      mark(kSwiglu);
      gemm(*L.down, m.sw.get(), m.y.get());
    }
    if (opt_.tp_comms) opt_.tp_comms->all_reduce_bf16(m.y.get(), size_t(B) * size_t(H), opt_.tp_rank, st);
    mark(kDown);
    if (!fuse || l + 1 == c.n_layers) {
      norm.x = xr;
      norm.gain = l + 1 < c.n_layers ? m.layers[size_t(l + 1)].attn_norm.get() : m.out_norm.get();
      cuda::rmsnorm(norm, st, pdl);  // x += down; a = RMSNorm(x) g_next
      mark(kNormFfn);
    }
  }
  // The LM head always over kMaxMicroBatch rows (rows >= B hold stale inputs,
  // their logits unread): cuBLASLt picks its kernel, and so the summation
  // order, by M; one M keeps every row's logits the same bits in any bucket.
  // The head is memory-bound (its weights), so the extra rows cost ~nothing.
  m.lt.matmul(cuda::LtInput::kBF16, m.a.get(), lm_head_rows(), m.logits.get(), Bm, lm_rows_, H, nullptr, nullptr, st,
              cuda::LtOutput::kF32);
  mark(kLmHead);
  cuda::LogitsReduceArgs ra;
  ra.logits = m.logits.get();
  ra.vocab = lm_rows_;
  ra.rows = B;
  ra.targets = d_target;
  ra.out = m.row_stats.get();
  cuda::logits_reduce(ra, st, pdl);
  mark(kReduce);
  if (opt_.gpu_sampling) {  // the sampled rows' tokens (rows with top_k 0 return at once)
    cuda::SampleArgs sa;
    sa.logits = m.logits.get();
    sa.ld = lm_rows_;
    sa.vocab = sampleable_vocab_;
    sa.rows = B;
    sa.samplers = m.samplers.get();
    sa.out = m.sampled.get();
    cuda::sample_topk(sa, st, pdl);
    mark(kSample);
  }
}

void GpuEngine::micro_step(const std::vector<MicroRow>& rows) {
  Impl& m = *impl_;
  const int n = int(rows.size()), Bm = kMaxMicroBatch;
  const int bucket = bucket_of(n);
  const size_t V = size_t(lm_rows_);
  cudaStream_t st = m.stream;
  // ---- the row map: real rows, then the padding rows (engine.h) -----------------------
  int* h = m.h_ints.get();
  for (int i = 0; i < bucket; ++i) {
    const bool real = i < n;
    const MicroRow& r = real ? rows[size_t(i)] : MicroRow{};
    h[kTok * Bm + i] = real ? r.token : 0;
    h[kPos * Bm + i] = real ? r.pos : i;
    h[kBase * Bm + i] = real ? r.slot * impl_->slots_per_seq : m.scratch_base;
    h[kLen * Bm + i] = (real ? r.pos : i) + 1;
    h[kRow * Bm + i] = i;
    h[kTarget * Bm + i] = real ? r.target : -1;
  }
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.ints.get(), h, size_t(kMapRows) * Bm * sizeof(int), cudaMemcpyHostToDevice, st));
  if (opt_.gpu_sampling) {
    for (int i = 0; i < bucket; ++i) {
      cuda::SampleRow& sr = m.h_samplers[size_t(i)];
      sr = cuda::SampleRow{};
      if (i < n && rows[size_t(i)].top_k > 0) {
        const MicroRow& r = rows[size_t(i)];
        sr.u = r.u, sr.temperature = r.temperature, sr.top_p = r.top_p, sr.min_p = r.min_p, sr.top_k = r.top_k;
      }
    }
    FUTR_CUDA_CHECK(cudaMemcpyAsync(m.samplers.get(), m.h_samplers.get(), size_t(bucket) * sizeof(cuda::SampleRow),
                                    cudaMemcpyHostToDevice, st));
  }
  // ---- the step: a graph replay, or the same launches eagerly -------------------------
  const size_t k = bucket_index(bucket);
  if (m.prof && m.warm[k]) {
    // Profiled: the step captured with an event node after every launch (no
    // PDL), replayed once: GPU times without the host's launch costs.
    cuda::Graph::capture(st, [&](cudaStream_t s) { enqueue(bucket, s); }).launch(st);
  } else if (opt_.graphs && m.warm[k]) {
    if (!m.graphs[k].valid()) m.graphs[k] = cuda::Graph::capture(st, [&](cudaStream_t s) { enqueue(bucket, s); });
    m.graphs[k].launch(st);
    ++m.graph_launches;
  } else {
    enqueue(bucket, st);
    m.warm[k] = true;
  }
  // ---- results: row stats, the logits rows asked for, the K/V check -------------------
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_stats.get(), m.row_stats.get(), size_t(bucket) * sizeof(cuda::LogitsRowStats),
                                  cudaMemcpyDeviceToHost, st));
  if (opt_.gpu_sampling)
    FUTR_CUDA_CHECK(
        cudaMemcpyAsync(m.h_sampled.get(), m.sampled.get(), size_t(bucket) * sizeof(int), cudaMemcpyDeviceToHost, st));
  for (int i = 0; i < n; ++i)
    if (rows[size_t(i)].logits) {
      FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_logits.get() + size_t(i) * V, m.logits.get() + size_t(i) * V,
                                      V * sizeof(float), cudaMemcpyDeviceToHost, st));
      ++m.logits_rows_copied;
    }
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_nonfinite.get(), m.nonfinite.get(), sizeof(int), cudaMemcpyDeviceToHost, st));
  // The one synchronization of a micro-step (with TP: polled, with a timeout).
  if (opt_.tp_comms) opt_.tp_comms->synchronize(opt_.tp_rank, st, opt_.tp_timeout_s);
  else FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  if (m.prof) m.prof->accumulate();
  m.last_bucket = bucket;
  ++m.micro_steps;
  const int nonfinite = m.h_nonfinite[0];
  if (nonfinite != 0) {
    m.nonfinite.fill_bytes(0, st);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  }
  FUTR_CHECK(nonfinite == 0, "GPU engine: a key or value row was not finite (the weights or the input produce "
             "NaN/Inf)");
}

const float* GpuEngine::fetch_logits_row(int k) {
  Impl& m = *impl_;
  const size_t V = size_t(lm_rows_);
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_logits.get() + size_t(k) * V, m.logits.get() + size_t(k) * V, V * sizeof(float),
                                  cudaMemcpyDeviceToHost, m.stream));
  FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  ++m.logits_rows_copied;
  return m.h_logits.get() + size_t(k) * V;
}

const uint16_t* GpuEngine::lm_head_rows() const {
  const Impl& m = *impl_;
  return m.lm_head.size() ? m.lm_head.get() : m.embd.get() + size_t(lm_begin_) * size_t(config_.hidden);
}

void GpuEngine::enqueue_prefill_outputs(int rows) {
  Impl& m = *impl_;
  const int Bm = kMaxMicroBatch;
  cudaStream_t st = m.stream;
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.ints.get(), m.h_ints.get(), size_t(kMapRows) * Bm * sizeof(int),
                                  cudaMemcpyHostToDevice, st));
  cuda::RmsNormArgs norm;  // x = the residual row (gathered from the chunk's rows); a = RMSNorm(x) g_out
  norm.x = m.x.get();
  norm.tokens = m.ints.get() + kTok * Bm;
  norm.embd = m.prefill->x();
  norm.gain = m.out_norm.get();
  norm.out = m.a.get();
  norm.rows = rows;
  norm.H = config_.hidden;
  norm.eps = config_.rms_eps;
  cuda::rmsnorm(norm, st);
  // kMaxMicroBatch rows, as the decode step's head (enqueue): the same kernel, the same bits.
  m.lt.matmul(cuda::LtInput::kBF16, m.a.get(), lm_head_rows(), m.logits.get(), Bm, lm_rows_, config_.hidden,
              nullptr, nullptr, st, cuda::LtOutput::kF32);
  cuda::LogitsReduceArgs ra;
  ra.logits = m.logits.get();
  ra.vocab = lm_rows_;
  ra.rows = rows;
  ra.targets = m.ints.get() + kTarget * Bm;
  ra.out = m.row_stats.get();
  cuda::logits_reduce(ra, st);
}

PrefillPath::Shared GpuEngine::prefill_shared(std::vector<layout::KvLayerPtrs>& caches) {
  Impl& m = *impl_;
  caches.clear();
  for (Impl::Layer& L : m.layers) caches.push_back(L.ptrs(m.num_slots));
  PrefillPath::Shared sh;
  sh.embd = m.embd.get();
  sh.rope_cos = m.rope_cos.get();
  sh.rope_sin = m.rope_sin.get();
  sh.cache = caches;
  sh.mirror = opt_.kv != KvFormat::kBf16;
  sh.rot_block = opt_.kv == KvFormat::kInt4Rot ? opt_.kv_block : 0;
  sh.nonfinite = m.nonfinite.get();
  return sh;
}

void GpuEngine::prefill_runs(std::span<const BatchRow> rows, const std::vector<const runtime::SeqRun*>& runs,
                             const std::vector<int>& rank, runtime::StepResult& r) {
  Impl& m = *impl_;
  const int Bm = kMaxMicroBatch;
  const size_t V = size_t(lm_rows_);
  cudaStream_t st = m.stream;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<cuda::KvLayerPtrs> caches;
  const PrefillPath::Shared sh = prefill_shared(caches);
  const int cap = m.prefill->max_rows();
  std::vector<int32_t> tokens;
  std::vector<PrefillPath::Request> reqs;
  std::vector<int> batch_row;                  // [chunk rows] the row's index in the batch
  std::vector<std::pair<int, int>> lengths;    // (slot, length) of the chunk's requests after it
  std::vector<int> out;                        // chunk rows with an output
  // Delayed scaling: chunks of one sequence, run with that sequence's own
  // state, one call of its state machine per window of `cap` positions
  // (prefill.h): a chunk stops at the window's end, and only the chunk that
  // reaches it ends the call.
  const bool per_seq = m.prefill->scaling() == Fp8Scaling::kDelayed;
  cuda::DeviceScaleBank* bank = nullptr;
  bool end_call = true;
  auto flush = [&] {
    if (tokens.empty()) return;
    m.prefill->run(tokens, reqs, sh, st, bank, end_call);
    FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_nonfinite.get(), m.nonfinite.get(), sizeof(int), cudaMemcpyDeviceToHost, st));
    FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
    m.prefill->collect();  // the profile's intervals of this chunk (when profiling)
    if (m.h_nonfinite[0] != 0) {
      m.nonfinite.fill_bytes(0, st);
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
      fail("GPU engine (prefill): a key or value row was not finite (the weights or the input produce NaN/Inf)");
    }
    // The rows that asked for an output: final norm, LM head, reductions, in blocks of 32.
    out.clear();
    for (size_t i = 0; i < tokens.size(); ++i)
      if (rows[size_t(batch_row[i])].out != RowOutput::kNone) out.push_back(int(i));
    for (size_t b0 = 0; b0 < out.size(); b0 += size_t(Bm)) {
      const int nb = int(std::min(out.size() - b0, size_t(Bm)));
      int* h = m.h_ints.get();
      std::vector<char> copy(static_cast<size_t>(nb));
      for (int j = 0; j < nb; ++j) {
        const BatchRow& row = rows[size_t(batch_row[size_t(out[b0 + size_t(j)])])];
        h[kTok * Bm + j] = out[b0 + size_t(j)];
        h[kTarget * Bm + j] = row.out == RowOutput::kLogprob ? row.target : -1;
        copy[size_t(j)] = row.out == RowOutput::kLogits ||
                          (row.out == RowOutput::kToken && !table_.sampler(table_.slot(row.seq)).plain_greedy());
      }
      enqueue_prefill_outputs(nb);
      FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_stats.get(), m.row_stats.get(), size_t(nb) * sizeof(cuda::LogitsRowStats),
                                      cudaMemcpyDeviceToHost, st));
      for (int j = 0; j < nb; ++j)
        if (copy[size_t(j)]) {
          FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_logits.get() + size_t(j) * V, m.logits.get() + size_t(j) * V,
                                          V * sizeof(float), cudaMemcpyDeviceToHost, st));
          ++m.logits_rows_copied;
        }
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
      m.prefill_output_rows += nb;
      for (int j = 0; j < nb; ++j) {
        const int i = batch_row[size_t(out[b0 + size_t(j)])];
        const BatchRow& row = rows[size_t(i)];
        const cuda::LogitsRowStats& s = m.h_stats[size_t(j)];
        const float* z = m.h_logits.get() + size_t(j) * V;
        switch (row.out) {
          case RowOutput::kNone: break;
          case RowOutput::kLogits: std::memcpy(r.logits.row(rank[size_t(i)]), z, V * sizeof(float)); break;
          case RowOutput::kToken: {
            runtime::Sampler& sampler = table_.sampler(table_.slot(row.seq));
            int32_t t = 0;
            if (copy[size_t(j)]) {
              t = sampler.sample({z, V});
              ++m.host_sampled;
            } else if (s.nonfinite == 0) {
              t = s.argmax;
            } else {
              t = sampler.sample({fetch_logits_row(j), V});  // NaN/+inf: the host's rule
            }
            r.tokens[size_t(rank[size_t(i)])] = t;
            break;
          }
          case RowOutput::kLogprob:
            r.logprobs[size_t(rank[size_t(i)])] =
                s.nonfinite == 0 ? s.logprob : -runtime::token_nll({fetch_logits_row(j), V}, row.target);
            break;
        }
      }
    }
    for (const auto& [slot, len] : lengths) table_.set_length(slot, len);
    tokens.clear(), reqs.clear(), batch_row.clear(), lengths.clear();
  };
  for (const runtime::SeqRun* run : runs) {
    const int slot = table_.slot(run->seq);
    if (per_seq) {
      flush();
      bank = seq_bank(slot);
    }
    for (int i = run->begin; i < run->end;) {
      if (int(tokens.size()) == cap) flush();
      int take = std::min(run->end - i, cap - int(tokens.size()));
      if (per_seq) take = std::min(take, cap - rows[size_t(i)].pos % cap);  // up to the window's end
      reqs.push_back({take, rows[size_t(i)].pos, slot * m.slots_per_seq});
      for (int j = i; j < i + take; ++j) {
        tokens.push_back(rows[size_t(j)].token);
        batch_row.push_back(j);
      }
      lengths.push_back({slot, rows[size_t(i + take - 1)].pos + 1});
      i += take;
      if (per_seq) {
        end_call = (rows[size_t(i - 1)].pos + 1) % cap == 0;
        flush();
        end_call = true;
      }
    }
  }
  flush();
  m.prefill_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

runtime::StepResult GpuEngine::step(std::span<const BatchRow> rows) {
  const runtime::BatchPlan plan =
      runtime::plan_batch(rows, info_, [&](SeqId id) { return table_.length_or_closed(id); });
  Impl& m = *impl_;
  const size_t V = size_t(lm_rows_);  // the logits' width (the rank's vocabulary rows with TP)
  runtime::StepResult r;
  if (plan.n_logits > 0) r.logits = Tensor({int64_t(plan.n_logits), int64_t(V)});
  r.tokens.resize(size_t(plan.n_tokens));
  r.logprobs.resize(size_t(plan.n_logprobs));
  // Each output row's rank among the rows of its kind (results are in batch order).
  std::vector<int> rank(rows.size(), -1);
  {
    int nl = 0, nt = 0, np = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].out == RowOutput::kLogits) rank[i] = nl++;
      if (rows[i].out == RowOutput::kToken) rank[i] = nt++;
      if (rows[i].out == RowOutput::kLogprob) rank[i] = np++;
    }
  }
  struct Cursor {
    const runtime::SeqRun* run;
    int next;
    int slot;
  };
  std::vector<Cursor> live;
  std::vector<const runtime::SeqRun*> prompt_runs;  // through the prefill path (engine.h)
  for (const runtime::SeqRun& run : plan.runs) {
    // Exactly the prompt rows take the prefill path, whatever the step's
    // chunking (runtime/engine.h BatchRow::prompt): a run of prompt rows
    // there, any other run through the micro-steps.
    const bool prompt = std::all_of(rows.begin() + run.begin, rows.begin() + run.end,
                                    [](const BatchRow& b) { return b.prompt; });
    if (m.prefill && prompt) prompt_runs.push_back(&run);
    else live.push_back({&run, run.begin, table_.slot(run.seq)});
  }
  if (!prompt_runs.empty()) prefill_runs(rows, prompt_runs, rank, r);
  std::vector<MicroRow> micro;
  std::vector<int> which;
  std::vector<int> take;  // [live] rows of each run in this micro-step
  while (!live.empty()) {
    micro.clear(), which.clear();
    // Rows per run: one from every run first (up to kMaxMicroBatch runs), then
    // more of the runs that have more (prompt chunks), round by round, until
    // the micro-step is full. A run's rows go in together and in order: row
    // i of a run attends to the K/V its earlier rows append in the same
    // micro-step (the append kernel completes before the attention reads).
    // A row asking for a token ends its run's rows of the micro-step, so a
    // sequence's draws happen in row order (the sampler's generator and history).
    take.assign(live.size(), 0);
    {
      int total = 0;
      for (bool more = true; more && total < kMaxMicroBatch;) {
        more = false;
        for (size_t k = 0; k < live.size() && total < kMaxMicroBatch; ++k)
          if (live[k].next + take[k] < live[k].run->end && (take[k] > 0 || k < size_t(kMaxMicroBatch)) &&
              (take[k] == 0 || rows[size_t(live[k].next + take[k] - 1)].out != RowOutput::kToken)) {
            ++take[k], ++total;
            more = true;
          }
      }
    }
    for (size_t k = 0; k < live.size(); ++k)
      for (int j = 0; j < take[k]; ++j) {
      const BatchRow& row = rows[size_t(live[k].next + j)];
      MicroRow mr;
      mr.token = row.token;
      mr.slot = live[k].slot;
      mr.pos = row.pos;
      mr.target = row.out == RowOutput::kLogprob ? row.target : -1;
      // Only kLogits rows and the rows the host samples need their logits (engine.h);
      // the rows sample_topk draws take their uniform from the sequence's generator now.
      mr.logits = row.out == RowOutput::kLogits;
      if (row.out == RowOutput::kToken) {
        runtime::Sampler& sampler = table_.sampler(live[k].slot);
        if (opt_.gpu_sampling && sampler.engine_drawable(cuda::kSampleMaxTopK)) {
          const runtime::SamplerConfig& sc = sampler.config();
          mr.u = sampler.next_uniform();
          mr.temperature = sc.temperature, mr.top_p = sc.top_p, mr.min_p = sc.min_p, mr.top_k = sc.top_k;
        } else {
          mr.logits = !sampler.plain_greedy();
        }
      }
      micro.push_back(mr);
      which.push_back(live[k].next + j);
      }
    micro_step(micro);
    for (size_t k = 0; k < which.size(); ++k) {
      const int i = which[k];
      const BatchRow& row = rows[size_t(i)];
      const int slot = micro[k].slot;
      table_.set_length(slot, row.pos + 1);
      const cuda::LogitsRowStats& s = m.h_stats[k];
      const float* z = m.h_logits.get() + k * V;
      switch (row.out) {
        case RowOutput::kNone: break;
        case RowOutput::kLogits: std::memcpy(r.logits.row(rank[size_t(i)]), z, V * sizeof(float)); break;
        case RowOutput::kToken: {
          runtime::Sampler& sampler = table_.sampler(slot);
          int32_t t = 0;
          if (micro[k].logits) {
            t = sampler.sample({z, V});
            ++m.host_sampled;
          } else if (micro[k].top_k > 0) {  // drawn by sample_topk; NaN/+inf or nothing drawable: the host's rule
            const int g = m.h_sampled[k];
            t = s.nonfinite == 0 && g >= 0 ? g : sampler.sample({fetch_logits_row(int(k)), V});
            ++m.gpu_sampled;
          } else if (s.nonfinite == 0) {
            t = s.argmax;
          } else {
            t = sampler.sample({fetch_logits_row(int(k)), V});  // NaN/+inf: the host's rule
          }
          r.tokens[size_t(rank[size_t(i)])] = t;
          break;
        }
        case RowOutput::kLogprob:
          // NaN/+inf in the row: what the host's token_nll gives (NaN), never a finite number.
          r.logprobs[size_t(rank[size_t(i)])] =
              s.nonfinite == 0 ? s.logprob : -runtime::token_nll({fetch_logits_row(int(k)), V}, row.target);
          break;
      }
    }
    // Advance the cursors of this micro-step's runs; drop the finished ones.
    // Runs not in this micro-step keep their order, after the ones that were.
    std::vector<Cursor> rest, waiting;
    for (size_t k = 0; k < live.size(); ++k) {
      live[k].next += take[k];
      if (live[k].next < live[k].run->end) (take[k] > 0 ? rest : waiting).push_back(live[k]);
    }
    rest.insert(rest.end(), waiting.begin(), waiting.end());
    live.swap(rest);
  }
  return r;
}

nlohmann::json GpuEngine::stats() const {
  const Impl& m = *impl_;
  nlohmann::json j;
  j["engine"] = info_.name;
  j["weights"] = to_string(info_.weights);
  j["kv"] = to_string(info_.kv);
  j["sequences_open"] = table_.open_count();
  j["max_seqs"] = info_.max_seqs;
  j["ctx"] = info_.ctx;
  j["kv_positions_used"] = table_.positions_used();
  j["kv_positions_free"] = free_positions();
  j["kv_bytes"] = m.kv_bytes;
  j["weight_bytes"] = m.weight_bytes;
  j["graphs"] = opt_.graphs;
  int captured = 0;
  for (const cuda::Graph& g : m.graphs) captured += g.valid() ? 1 : 0;
  j["graphs_captured"] = captured;
  j["micro_steps"] = m.micro_steps;
  j["graph_launches"] = m.graph_launches;
  j["logits_rows_copied"] = m.logits_rows_copied;
  j["host_sampled_rows"] = m.host_sampled;
  j["gpu_sampled_rows"] = m.gpu_sampled;
  j["gpu_sampling"] = opt_.gpu_sampling;
  j["pdl"] = opt_.pdl;
  if (m.prefill) {
    std::vector<const cuda::DeviceScaleBank*> banks;
    for (const auto& b : m.seq_banks)
      if (b) banks.push_back(b.get());
    nlohmann::json pf = m.prefill->stats(m.stream, banks);
    pf["fp8_calibration_ms"] = m.fp8_calibration_ms;
    pf["fp8_calibration_tokens"] = m.fp8_calibration_tokens;
    pf["output_rows"] = m.prefill_output_rows;
    pf["host_ms"] = m.prefill_ms;
    pf["profile"] = m.prefill->profile();
    // The CPU engine's "fp8" keys (the FP8 activations of the prefill path), for the same reports.
    j["fp8"] = {{"calls", pf["fp8_calls"]},           {"saturated_calls", pf["fp8_saturated_calls"]},
                {"saturated_values", pf["fp8_saturated_values"]}, {"zero_calls", pf["fp8_zero_calls"]},
                {"max_amax", pf["fp8_max_amax"]},       {"history", pf["fp8_history"]},
                {"margin", pf["fp8_margin"]},           {"policy", pf["fp8_policy"]},
                {"scaling", pf["fp8_scaling"]},
                {"recomputes", 0}};
    j["prefill"] = pf;
  } else {
    j["prefill"] = nullptr;
  }
  if (m.prof && m.prof->micro_steps > 0) {
    const Profiler& p = *m.prof;
    nlohmann::json ops = nlohmann::json::array();
    for (int i = 0; i < kOps; ++i)
      if (p.calls[size_t(i)] > 0)
        ops.push_back({{"op", kOpNames[i]},
                       {"us_per_micro_step", p.us[size_t(i)] / double(p.micro_steps)},
                       {"launches_per_micro_step", double(p.calls[size_t(i)]) / double(p.micro_steps)}});
    j["profile"] = {{"micro_steps", p.micro_steps},
                    {"bucket", m.last_bucket},
                    {"us_per_micro_step", p.step_us / double(p.micro_steps)},
                    {"ops", ops}};
  }
  return j;
}

GpuEngine::KvLayerDump GpuEngine::dump_kv_layer(int layer) const {
  const Impl& m = *impl_;
  FUTR_CHECK(layer >= 0 && layer < config_.n_layers, "dump_kv_layer: no layer {}", layer);
  FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const Impl::Layer& L = m.layers[size_t(layer)];
  KvLayerDump d;
  d.k = L.k.download(m.stream);
  d.v = L.v.download(m.stream);
  if (L.k4.size()) {
    d.k4 = L.k4.download(m.stream);
    d.v4 = L.v4.download(m.stream);
    d.ks = L.ks.download(m.stream);
    d.vs = L.vs.download(m.stream);
  }
  d.num_slots = m.num_slots;
  d.slots_per_seq = m.slots_per_seq;
  return d;
}

bool GpuEngine::set_profiling(bool on) {
  Impl& m = *impl_;
  if (m.prefill) m.prefill->set_profiling(on);
  if (on && m.prof) {  // on again: new sums, the same events (created on first use, outside later timings)
    m.prof->us = {};
    m.prof->calls = {};
    m.prof->micro_steps = 0;
    m.prof->step_us = 0;
  } else if (on) {
    m.prof = std::make_unique<Profiler>();
  } else {
    m.prof.reset();
  }
  return true;
}

}  // namespace futr::gpu
