// The GPU engine's decode path (see engine.h).
#include "gpu_engine/engine.h"

#include "gpu_engine/device_weights.h"
#include "gpu_engine/kv_cache.h"
#include "gpu_engine/launch_executor.h"
#include "gpu_engine/nccl.h"
#include "gpu_engine/prefill.h"
#include "gpu_engine/profiler.h"
#include "gpu_engine/step_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "launch/check.h"
#include "launch/cublaslt.h"
#include "launch/decode_attention.h"
#include "launch/decode_ops.h"
#include "launch/device.h"
#include "launch/fp8_scaling.h"
#include "launch/lm_head.h"
#include "launch/stream.h"
#include "runtime/batch.h"
#include "runtime/kv_blocks.h"
#include "runtime/perplexity.h"

namespace futr::gpu {

using runtime::BatchRow;
using runtime::RowOutput;
using runtime::SeqId;

namespace {

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

bool disabled_by_env(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

}  // namespace

// ---- device state -------------------------------------------------------------------
struct GpuEngine::Impl {
  cuda::Stream stream;
  cuda::CublasLt lt;
  std::unique_ptr<KvCache> kv;                  // the cache: slot regions, scratch slots, RoPE tables
  std::unique_ptr<StepBuffers> buf;             // the device buffers of one micro-step
  std::unique_ptr<DeviceWeights> weights;       // INT4 (decode), FP8 (prefill), BF16 (embedding, gains, head)
  StepPlanConfig plan_config;                   // what the plans are built from
  std::array<StepPlan, kBuckets.size()> plans;  // one per bucket (kBuckets order), built once
  std::unique_ptr<LaunchExecutor> exec;         // runs a plan: launches, one CUDA graph per bucket
  // Host side of the copies around a micro-step (pinned).
  Pinned<int> h_ints;                    // [kMapRows][B]
  Pinned<cuda::LogitsRowStats> h_stats;  // [B]
  Pinned<cuda::SampleRow> h_samplers;    // [B]
  Pinned<int> h_sampled;                 // [B]
  Pinned<float> h_logits;                // [B][vocab] (only the rows asked for are written)
  Pinned<int> h_nonfinite;               // [1]
  // A paged cache (kv->paged()): the block pool, each sequence slot's blocks,
  // and the host side of the micro-step's block tables [B][table_stride].
  std::unique_ptr<runtime::BlockPool> pool;
  std::vector<runtime::SequenceBlocks> seq_blocks;  // [max_seqs]
  Pinned<int> h_tables;
  int table_stride = 0;
  int last_bucket = 0;  // the bucket of the last micro-step
  int64_t micro_steps = 0, logits_rows_copied = 0, host_sampled = 0, gpu_sampled = 0;
  std::unique_ptr<Profiler> prof;        // set while profiling (set_profiling)
  std::unique_ptr<PrefillPath> prefill;  // the FP8 prefill path (null: prompts through the decode step)
  // Delayed FP8 scaling: each sequence slot's own scale state (null until its first prompt chunk).
  std::vector<std::unique_ptr<cuda::DeviceScaleBank>> seq_banks;
  int64_t prefill_output_rows = 0;
  double prefill_ms = 0;          // host wall time of the prefill chunks (incl. their outputs)
  double fp8_calibration_ms = 0;  // the device calibration at construction (0: none)
  int64_t fp8_calibration_tokens = 0;
};

static_assert(GpuEngine::kMaxMicroBatch == kDecodeMaxRows && GpuEngine::kBuckets == kDecodeBuckets,
              "the engine's buckets are the step plans'");

int GpuEngine::bucket_of(int rows) {
  FUTR_ASSERT(rows >= 1 && rows <= kMaxMicroBatch);
  for (int b : kBuckets)
    if (b >= rows) return b;
  return kMaxMicroBatch;
}

GpuEngine::GpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                     const GpuEngineOptions& o)
    : config_(o.rank_config ? *o.rank_config : model.config),
      sampleable_vocab_(model.sampleable_vocab()),
      opt_(o),
      impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = config_;
  FUTR_CHECK(q && q->format == WeightFormat::kInt4,
             "GPU engine: runs INT4 weights (--weights int4, or a .futr file with INT4 weights)");
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const auto t0 = Clock::now();
  size_t weights_est = 0;
  for (const auto& [name, t] : q->tensors)
    weights_est += size_t(t.n) * t.k / 2 + size_t(t.n) * (t.k / t.int4.group) * 2;
  weights_est += size_t(c.vocab) * c.hidden * 2 * (c.tied_embeddings ? 1 : 2);
  init(fmt::format("int4 weights ({})", q->method), weights_est);
  const auto t1 = Clock::now();
  impl_->weights = std::make_unique<DeviceWeights>(model, c, *q, lm_begin_, lm_rows_, kMaxMicroBatch);
  init_step();
  const auto t2 = Clock::now();
  init_prefill();
  const auto t3 = Clock::now();
  if (opt_.log)
    opt_.log(
        fmt::format("gpu engine ready in {:.2f} s (device and buffers {:.2f} s, weights to the GPU {:.2f} s, "
                    "prefill path {:.2f} s{})",
                    secs(t0, t3), secs(t0, t1), secs(t1, t2), secs(t2, t3),
                    impl_->fp8_calibration_ms > 0
                        ? fmt::format(" of which FP8 calibration {:.0f} ms", impl_->fp8_calibration_ms)
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
  impl_->weights =
      std::make_unique<DeviceWeights>(c, seed, lm_begin_, lm_rows_, kMaxMicroBatch, impl_->stream);
  init_step();
  init_prefill();
}

void GpuEngine::init_step() {
  Impl& m = *impl_;
  if (opt_.lm_head_int4) {
    const auto t0 = std::chrono::steady_clock::now();
    m.weights->quantize_lm_head_int4(lm_head_int4_group(), m.stream);
    if (opt_.log)
      opt_.log(fmt::format("LM head quantized to INT4 (group {}) in {:.2f} s", lm_head_int4_group(),
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }
  StepPlanConfig& pc = m.plan_config;
  pc.gemms.resize(size_t(config_.n_layers));
  for (int l = 0; l < config_.n_layers; ++l) {
    const DeviceWeights::Layer& L = m.weights->layer(l);
    const cuda::W4Linear* w[4] = {L.qkv.get(), L.o.get(), L.gate_up.get(), L.down.get()};
    for (int p = 0; p < 4; ++p) pc.gemms[size_t(l)][size_t(p)] = {w[p]->n(), w[p]->k(), w[p]->group()};
  }
  for (size_t k = 0; k < kBuckets.size(); ++k) {
    m.plans[k] = build_step_plan(pc, kBuckets[k]);
    // The plan's GEMM configurations are the ones the matrices choose themselves
    // (QuantLinear::config: the same function of M, N, K, group and the SM count),
    // run by the gemv where the plan fuses inputs into several rows (its
    // workspace reserved here: one CTA per split).
    for (const StepOp& op : m.plans[k].ops) {
      if (op.kind != StepOpKind::kGemm) continue;
      const DeviceWeights::Layer& L = m.weights->layer(op.layer);
      cuda::W4Linear& w = op.w.param == StepParam::kQkv      ? *L.qkv
                          : op.w.param == StepParam::kO      ? *L.o
                          : op.w.param == StepParam::kGateUp ? *L.gate_up
                                                             : *L.down;
      const bool gemv_rows = op.rows > 1 && op.gemm.kernel == cuda::DecodeKernel::kGemv;
      const cuda::DecodeConfig a = op.gemm,
                               b = gemv_rows ? cuda::decode_as_gemv(w.config(op.rows)) : w.config(op.rows);
      if (gemv_rows) w.reserve(a, op.rows);
      FUTR_ASSERT(a.kernel == b.kernel && a.tn == b.tn && a.loads == b.loads && a.batches == b.batches &&
                  a.mt == b.mt && a.splits == b.splits && a.fold == b.fold && a.seq == b.seq &&
                  a.ctas == b.ctas && a.run == b.run && a.probe == b.probe && !a.pdl && !b.pdl);
    }
  }
  LaunchExecutor::Options eo;
  eo.graphs = opt_.graphs;
  eo.pdl = opt_.pdl;
  eo.tp_comms = opt_.tp_comms;
  eo.tp_rank = opt_.tp_rank;
  eo.hidden = config_.hidden;
  eo.rms_eps = config_.rms_eps;
  eo.lm_head_streaming = opt_.lm_head_streaming;
  eo.lm_head_int4 = opt_.lm_head_int4;
  m.exec = std::make_unique<LaunchExecutor>(*m.weights, *m.kv, *m.buf, m.lt, eo);
  // Every bucket's step run now on padding rows, eagerly and then captured:
  // the first requests replay graphs as every later step does (a first use
  // costs an eager run and a capture, ~2-4 ms at SmolLM2's 185 launches: a
  // speculative request meets buckets 2, 4 and 8 in its first steps). Not
  // tensor parallel: the ranks' collectives start with their first step.
  if (!opt_.tp_comms) warm_decode_buckets();
}

void GpuEngine::init_prefill() {
  Impl& m = *impl_;
  const bool want = opt_.prefill_fp8 || opt_.prefill_synthetic;
  if (!want) {
    info_.describe += "; prompts through the decode step";
    return;
  }
  FUTR_CHECK(!opt_.tp_comms,
             "GPU engine: the FP8 prefill path does not run tensor parallel yet (--prefill=off)");
  const int rows = std::min(opt_.prefill_rows, std::max(opt_.max_step_tokens, 1));
  const std::string why = PrefillPath::unsupported_reason(config_);
  FUTR_CHECK(why.empty(), "the FP8 prefill path does not support this model: {}", why);
  // The FP8 projections join the engine's weights; the path borrows them, the embedding and the cache.
  if (opt_.prefill_fp8) m.weights->load_fp8(config_, *opt_.prefill_fp8);
  else m.weights->draw_fp8(config_, opt_.prefill_seed, m.stream);
  m.prefill = std::make_unique<PrefillPath>(config_, *m.weights, *m.kv, m.buf->nonfinite.get(), opt_.fp8,
                                            rows, m.stream);
  // Warm-up: one 16-row chunk into the padding rows' scratch slots and its
  // output pass (the kernels' modules load on first launch, cuBLASLt makes its
  // M = 1 plan), so the first prompt's time to first token is the prefill's
  // own; then the delayed-scaling state back to fresh (the warm-up's amax
  // must not enter any window).
  {
    static_assert(kMaxMicroBatch >= 16, "the warm-up chunk fits the scratch region");
    const int n = std::min(16, m.prefill->max_rows());
    const std::vector<int32_t> tokens(static_cast<size_t>(n), 0);
    const PrefillPath::Request req{n, 0, m.kv->scratch_base()};
    m.prefill->run(tokens, std::span<const PrefillPath::Request>(&req, 1), m.stream);
    m.h_ints[kTok * kMaxMicroBatch] = n - 1;
    m.h_ints[kTarget * kMaxMicroBatch] = -1;
    enqueue_prefill_outputs(1);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    m.prefill->reset_state(m.stream);
    m.buf->nonfinite.fill_bytes(0, m.stream);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  }
  // Static scales from the device when the weights came without stored amax
  // (quantized on load): the calibration windows run in sequence slot 0's
  // region (no sequence is open yet; its rows are overwritten before any read).
  if (!opt_.fp8_calibration.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    // A paged cache: the first blocks, as one contiguous region (no block is handed out yet).
    const int room = m.kv->paged() ? m.kv->scratch_base() : m.kv->slots_per_seq();
    const int window = std::max(1, std::min(opt_.fp8_calibration_window, room / 16 * 16));
    m.prefill->calibrate(opt_.fp8_calibration, window, 0, m.stream);
    m.buf->nonfinite.fill_bytes(0, m.stream);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    m.fp8_calibration_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    m.fp8_calibration_tokens = int64_t(opt_.fp8_calibration.size());
    opt_.fp8_calibration.clear();
    opt_.fp8_calibration.shrink_to_fit();
  }
  info_.describe += fmt::format(
      "; prompts: the FP8 prefill path (chunks of <= {} rows, {:.1f} MiB of FP8 weights, "
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
             "GPU engine: LM head rows [{}, {}) outside the vocabulary of {}", lm_begin_,
             int64_t(lm_begin_) + lm_rows_, c.vocab);
  if (o.tp_comms) {
    opt_.gpu_sampling = false;  // the TP engine samples from the gathered logits
    FUTR_CHECK(o.tp_rank >= 0 && o.tp_rank < o.tp_comms->size(), "GPU engine: rank {} of {}", o.tp_rank,
               o.tp_comms->size());
  }
  FUTR_CHECK(o.kv == KvFormat::kBf16 || o.kv == KvFormat::kInt4 || o.kv == KvFormat::kInt4Rot,
             "GPU engine: KV cache {} is not supported (bf16, int4, int4-rot)", to_string(o.kv));
  FUTR_CHECK(o.max_seqs >= 1 && o.max_seqs <= 4096,
             "the maximum number of sequences must be in 1..4096 (got {})", o.max_seqs);
  FUTR_CHECK(o.max_step_tokens >= 1 && o.max_step_tokens <= (1 << 20),
             "the maximum tokens per step must be in 1..1048576 (got {})", o.max_step_tokens);
  FUTR_CHECK(c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0, "GPU engine: {} heads over {} KV heads",
             c.n_heads, c.n_kv_heads);
  opt_.ctx = o.ctx > 0 ? o.ctx : c.max_context;
  FUTR_CHECK(opt_.ctx >= 1 && opt_.ctx <= (1 << 22), "--ctx {} out of range 1..4194304", opt_.ctx);
  if (disabled_by_env("FUTR_GPU_GRAPHS")) opt_.graphs = false;
  if (disabled_by_env("FUTR_GPU_SAMPLING")) opt_.gpu_sampling = false;
  if (disabled_by_env("FUTR_GPU_PDL")) opt_.pdl = false;
  if (disabled_by_env("FUTR_GPU_FUSE_NORM")) opt_.fuse_norm = false;
  if (const char* e = std::getenv("FUTR_GPU_FUSE_NORM_ROWS")) {
    const std::string v = e;
    FUTR_CHECK(v.size() == 1 && v[0] >= '1' && v[0] - '0' <= cuda::kDecodeGemvMaxRows,
               "FUTR_GPU_FUSE_NORM_ROWS={}: expected 1..{}", v, cuda::kDecodeGemvMaxRows);
    opt_.fuse_norm_rows = v[0] - '0';
  }
  if (disabled_by_env("FUTR_GPU_ATTN_CTAS")) opt_.attn_ctas = false;
  if (const char* e = std::getenv("FUTR_GPU_LM_HEAD")) {
    const std::string v = e;
    FUTR_CHECK(v == "streaming" || v == "cublaslt" || v == "int4",
               "FUTR_GPU_LM_HEAD={}: expected streaming, cublaslt or int4", v);
    opt_.lm_head_streaming = v != "cublaslt";
    opt_.lm_head_int4 = v == "int4";
  }
  if (opt_.lm_head_int4) opt_.lm_head_streaming = true;
  if (opt_.lm_head_streaming) {
    const char* why =
        cuda::lm_head_unsupported(lm_rows_, c.hidden, opt_.lm_head_int4 ? lm_head_int4_group() : 0);
    FUTR_CHECK(why[0] == 0,
               "GPU engine: the streaming LM head cannot run this model's head ([{} x {}]{}): {}", lm_rows_,
               c.hidden, opt_.lm_head_int4 ? ", int4" : "", why);
  }
  const bool int4 = o.kv != KvFormat::kBf16;
  const int rot = o.kv == KvFormat::kInt4Rot ? o.kv_block : 0;
  // Refuse what the kernels do not compile before allocating anything. The
  // longest length a launch sees: ctx, or a padding row's 32 (engine.h).
  cuda::AttentionShape shape{1,    c.n_kv_heads, c.n_heads / c.n_kv_heads,          c.head_dim,
                             int4, rot,          std::max(opt_.ctx, kMaxMicroBatch)};
  cuda::attention_heuristic(shape, dev.sm_count);

  Impl& m = *impl_;
  const int B = kMaxMicroBatch;

  // ---- KV cache: does it fit? (kv_cache.h), then the step's buffers ----------------
  FUTR_CHECK(o.kv_block_size >= 0 && o.kv_blocks >= 0 && (o.kv_blocks == 0 || o.kv_block_size > 0),
             "GPU engine: --kv-blocks {} needs a paged KV cache (--block-size 16, 32, 64 or 128; got {})",
             o.kv_blocks, o.kv_block_size);
  FUTR_CHECK(o.kv_block_size == 0 || !o.tp_comms,
             "GPU engine: a paged KV cache does not run tensor parallel yet (--block-size 0)");
  m.kv = std::make_unique<KvCache>(c, o.kv, o.kv_block, opt_.ctx, o.max_seqs, B, weights_est,
                                   KvPaging{o.kv_block_size, o.kv_blocks, o.gpu_memory_fraction});
  if (m.kv->paged()) {
    // Block ids fit the pool's range (KvCache checked 2^24); the scratch blocks come after them.
    m.pool = std::make_unique<runtime::BlockPool>(m.kv->blocks(), m.kv->block_size());
    m.seq_blocks.resize(size_t(o.max_seqs));
    const int Bk = m.kv->block_size();
    m.table_stride = std::max((opt_.ctx + Bk - 1) / Bk, m.kv->scratch_blocks());
    m.h_tables = Pinned<int>(size_t(B) * size_t(m.table_stride));
  }
  StepPlanConfig& pc = m.plan_config;
  pc.model = c;
  pc.lm_rows = lm_rows_;
  pc.sampleable_vocab = sampleable_vocab_;
  pc.kv = o.kv;
  pc.kv_block = o.kv_block;
  pc.ctx = opt_.ctx;
  pc.fuse_norm = opt_.fuse_norm;
  pc.fuse_norm_rows = opt_.fuse_norm_rows;
  pc.attention_ctas = opt_.attn_ctas;
  pc.gpu_sampling = opt_.gpu_sampling;
  pc.lm_head_streaming = opt_.lm_head_streaming;
  pc.lm_head_int4 = opt_.lm_head_int4;
  pc.tensor_parallel = opt_.tp_comms != nullptr;
  pc.sm_count = dev.sm_count;
  pc.attention_resident_per_sm = 0;  // the device's occupancy
  // The attention's split count, one for every bucket (batch invariance:
  // cuda::attention_heuristic_invariant); its workspace for B rows.
  m.buf = std::make_unique<StepBuffers>(c, lm_rows_, decode_attention_shape(pc, B),
                                        decode_attention_config(pc), m.table_stride);
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
      "gpu ({}, {} SMs; {}, KV {}{} {:.1f} MiB, ctx {} x {} sequences{}; {}, {}; decode micro-steps of up "
      "to {} rows)",
      dev.name, dev.sm_count, weights_what, to_string(o.kv),
      rot ? fmt::format(" (Hadamard block {})", rot) : "", double(m.kv->bytes()) / (1 << 20), opt_.ctx,
      o.max_seqs,
      m.kv->paged() ? fmt::format(", paged: {} blocks of {} = {} positions", m.kv->blocks(),
                                  m.kv->block_size(), m.kv->blocks() * m.kv->block_size())
                    : std::string(),
      opt_.graphs ? "CUDA graphs per batch bucket" : "eager launches (graphs off)",
      opt_.pdl ? "programmatic dependent launch" : "no PDL", kMaxMicroBatch);
  if (opt_.lm_head_streaming)
    info_.describe +=
        opt_.lm_head_int4 ? "; LM head: INT4, the streaming kernel" : "; LM head: the streaming kernel";
  info_.vocab = c.vocab;
  info_.ctx = opt_.ctx;
  info_.max_seqs = o.max_seqs;
  info_.max_step_tokens = o.max_step_tokens;
  info_.weights = WeightFormat::kInt4;
  info_.kv = o.kv;
  if (m.kv->paged()) {
    info_.kv_block_size = m.kv->block_size();
    info_.kv_blocks = m.kv->blocks();
  }
}

GpuEngine::~GpuEngine() = default;

void GpuEngine::open(SeqId id, const runtime::SamplerConfig& sampling) {
  const int s = table_.open(id, sampling);
  table_.sampler(s).limit_vocab(sampleable_vocab_);  // padded LM-head rows are never drawn
  // Delayed FP8 scaling: the sequence starts from a fresh state (no request sees another's history).
  Impl& m = *impl_;
  if (size_t(s) < m.seq_banks.size() && m.seq_banks[size_t(s)]) m.seq_banks[size_t(s)]->reset(m.stream);
  FUTR_ASSERT(!m.pool || m.seq_blocks[size_t(s)].table.empty());
}

cuda::DeviceScaleBank* GpuEngine::seq_bank(int slot) {
  Impl& m = *impl_;
  if (m.seq_banks.size() <= size_t(slot)) m.seq_banks.resize(size_t(slot) + 1);
  if (!m.seq_banks[size_t(slot)]) m.seq_banks[size_t(slot)] = m.prefill->new_bank();
  return m.seq_banks[size_t(slot)].get();
}

// The cache rows past len are overwritten before they are read again (attention masks t >= len).
void GpuEngine::truncate(SeqId id, int len) {
  const int s = table_.truncate(id, len);
  Impl& m = *impl_;
  if (m.pool) m.pool->truncate(m.seq_blocks[size_t(s)], len);
}

void GpuEngine::close(SeqId id) {
  const int s = table_.close(id);
  Impl& m = *impl_;
  if (m.pool) m.pool->release(m.seq_blocks[size_t(s)]);  // full blocks stay cached for attach_prefix()
}

int64_t GpuEngine::free_positions() const {
  const Impl& m = *impl_;
  return m.pool ? m.pool->free_blocks() * m.pool->block_size() : table_.free_positions();
}

int64_t GpuEngine::free_blocks() const {
  const Impl& m = *impl_;
  return m.pool ? m.pool->free_blocks() : 0;
}

int64_t GpuEngine::blocks_needed(SeqId id, int n) const {
  const Impl& m = *impl_;
  const int s = table_.slot(id);
  return m.pool ? m.pool->blocks_needed(m.seq_blocks[size_t(s)], n) : 0;
}

int GpuEngine::attach_prefix(SeqId id, std::span<const int32_t> tokens) {
  const int s = table_.slot(id);
  Impl& m = *impl_;
  if (!m.pool) return 0;
  FUTR_CHECK(table_.length(id) == 0,
             "a prefix attaches to an empty sequence (sequence {} holds {} positions)", id,
             table_.length(id));
  const int n =
      m.pool->attach(m.seq_blocks[size_t(s)], tokens.first(std::min(tokens.size(), size_t(info_.ctx))));
  table_.set_length(s, n);
  return n;
}

int GpuEngine::step_rows(int n) const {
  if (n <= 0) return n;
  const int full = (n - 1) / kMaxMicroBatch, rest = n - full * kMaxMicroBatch;
  return full * kMaxMicroBatch + bucket_of(rest);
}

std::optional<runtime::Sampler> GpuEngine::sampler_state(SeqId id) const {
  return table_.sampler(table_.slot(id));
}

void GpuEngine::restore_sampler(SeqId id, const runtime::Sampler& sampler) {
  table_.sampler(table_.slot(id)) = sampler;
}

void GpuEngine::upload_row_map(const std::vector<MicroRow>& rows, int bucket) {
  Impl& m = *impl_;
  const int n = int(rows.size()), Bm = kMaxMicroBatch;
  cudaStream_t st = m.stream;
  // ---- the row map: real rows, then the padding rows (engine.h) -----------------------
  int* h = m.h_ints.get();
  for (int i = 0; i < bucket; ++i) {
    const bool real = i < n;
    const MicroRow& r = real ? rows[size_t(i)] : MicroRow{};
    h[kTok * Bm + i] = real ? r.token : 0;
    h[kPos * Bm + i] = real ? r.pos : i;
    h[kBase * Bm + i] = m.pool ? 0 : real ? m.kv->slot_base(r.slot) : m.kv->scratch_base();  // paged: tables
    h[kLen * Bm + i] = (real ? r.pos : i) + 1;
    h[kRow * Bm + i] = i;
    h[kTarget * Bm + i] = real ? r.target : -1;
  }
  FUTR_CUDA_CHECK(
      cudaMemcpyAsync(m.buf->ints.get(), h, size_t(kMapRows) * Bm * sizeof(int), cudaMemcpyHostToDevice, st));
  if (m.pool) {
    // The rows' block tables: a real row its sequence's blocks up to its
    // position, a padding row the scratch blocks (its positions are its index).
    const int shift = m.kv->block_shift(), stride = m.table_stride;
    int used = 1;  // entries per row copied: the most any row reads
    for (int i = 0; i < bucket; ++i) {
      int* t = m.h_tables.get() + size_t(i) * size_t(stride);
      if (i < n) {
        const std::vector<runtime::BlockId>& table = m.seq_blocks[size_t(rows[size_t(i)].slot)].table;
        const int e = (rows[size_t(i)].pos >> shift) + 1;
        FUTR_ASSERT(size_t(e) <= table.size() && e <= stride);
        std::copy(table.begin(), table.begin() + e, t);
        used = std::max(used, e);
      } else {
        const int e = (i >> shift) + 1;
        for (int j = 0; j < e; ++j) t[j] = m.kv->scratch_block() + j;
        used = std::max(used, e);
      }
    }
    const size_t pitch = size_t(stride) * sizeof(int);
    FUTR_CUDA_CHECK(cudaMemcpy2DAsync(m.buf->tables.get(), pitch, m.h_tables.get(), pitch,
                                      size_t(used) * sizeof(int), size_t(bucket), cudaMemcpyHostToDevice,
                                      st));
  }
  if (opt_.gpu_sampling) {
    for (int i = 0; i < bucket; ++i) {
      cuda::SampleRow& sr = m.h_samplers[size_t(i)];
      sr = cuda::SampleRow{};
      if (i < n && rows[size_t(i)].top_k > 0) {
        const MicroRow& r = rows[size_t(i)];
        sr.u = r.u, sr.temperature = r.temperature, sr.top_p = r.top_p, sr.min_p = r.min_p,
        sr.top_k = r.top_k;
      }
    }
    FUTR_CUDA_CHECK(cudaMemcpyAsync(m.buf->samplers.get(), m.h_samplers.get(),
                                    size_t(bucket) * sizeof(cuda::SampleRow), cudaMemcpyHostToDevice, st));
  }
}

void GpuEngine::warm_decode_buckets() {
  Impl& m = *impl_;
  for (size_t k = 0; k < kBuckets.size(); ++k) {
    upload_row_map({}, kBuckets[k]);
    m.exec->run(m.plans[k], m.stream, nullptr);                   // eager: modules, cuBLASLt's plans
    if (opt_.graphs) m.exec->run(m.plans[k], m.stream, nullptr);  // captured, replayed
  }
  FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.buf->nonfinite.fill_bytes(0, m.stream);
  FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void GpuEngine::micro_step(const std::vector<MicroRow>& rows) {
  Impl& m = *impl_;
  const int n = int(rows.size());
  const int bucket = bucket_of(n);
  const size_t V = size_t(lm_rows_);
  cudaStream_t st = m.stream;
  upload_row_map(rows, bucket);
  // ---- the step: the bucket's plan, a graph replay or the same launches eagerly --------
  const size_t k = size_t(std::find(kBuckets.begin(), kBuckets.end(), bucket) - kBuckets.begin());
  m.exec->run(m.plans[k], st, m.prof.get());
  // ---- results: row stats, the logits rows asked for, the K/V check -------------------
  const StepBuffers& b = *m.buf;
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_stats.get(), b.row_stats.get(),
                                  size_t(bucket) * sizeof(cuda::LogitsRowStats), cudaMemcpyDeviceToHost, st));
  if (opt_.gpu_sampling)
    FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_sampled.get(), b.sampled.get(), size_t(bucket) * sizeof(int),
                                    cudaMemcpyDeviceToHost, st));
  for (int i = 0; i < n; ++i)
    if (rows[size_t(i)].logits) {
      FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_logits.get() + size_t(i) * V, b.logits.get() + size_t(i) * V,
                                      V * sizeof(float), cudaMemcpyDeviceToHost, st));
      ++m.logits_rows_copied;
    }
  FUTR_CUDA_CHECK(
      cudaMemcpyAsync(m.h_nonfinite.get(), b.nonfinite.get(), sizeof(int), cudaMemcpyDeviceToHost, st));
  // The one synchronization of a micro-step (with TP: polled, with a timeout).
  if (opt_.tp_comms) opt_.tp_comms->synchronize(opt_.tp_rank, st, opt_.tp_timeout_s);
  else FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  if (m.prof) m.prof->accumulate();
  m.last_bucket = bucket;
  ++m.micro_steps;
  const int nonfinite = m.h_nonfinite[0];
  if (nonfinite != 0) {
    m.buf->nonfinite.fill_bytes(0, st);
    FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  }
  FUTR_CHECK(nonfinite == 0,
             "GPU engine: a key or value row was not finite (the weights or the input produce "
             "NaN/Inf)");
}

const float* GpuEngine::fetch_logits_row(int k) {
  Impl& m = *impl_;
  const size_t V = size_t(lm_rows_);
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_logits.get() + size_t(k) * V, m.buf->logits.get() + size_t(k) * V,
                                  V * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  ++m.logits_rows_copied;
  return m.h_logits.get() + size_t(k) * V;
}

void GpuEngine::enqueue_prefill_outputs(int rows) {
  Impl& m = *impl_;
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.buf->ints.get(), m.h_ints.get(),
                                  size_t(kMapRows) * kMaxMicroBatch * sizeof(int), cudaMemcpyHostToDevice,
                                  m.stream));
  m.exec->enqueue_outputs(rows, m.prefill->x(), m.stream);
}

void GpuEngine::prefill_runs(std::span<const BatchRow> rows, const std::vector<const runtime::SeqRun*>& runs,
                             const std::vector<int>& rank, runtime::StepResult& r) {
  Impl& m = *impl_;
  const int Bm = kMaxMicroBatch;
  const size_t V = size_t(lm_rows_);
  cudaStream_t st = m.stream;
  const auto t0 = std::chrono::steady_clock::now();
  StepBuffers& b = *m.buf;
  const int cap = m.prefill->max_rows();
  std::vector<int32_t> tokens;
  std::vector<PrefillPath::Request> reqs;
  std::vector<int> batch_row;                // [chunk rows] the row's index in the batch
  std::vector<std::pair<int, int>> lengths;  // (slot, length) of the chunk's requests after it
  std::vector<int> out;                      // chunk rows with an output
  // Delayed scaling: chunks of one sequence, run with that sequence's own
  // state, one call of its state machine per window of `cap` positions
  // (prefill.h): a chunk stops at the window's end, and only the chunk that
  // reaches it ends the call.
  const bool per_seq = m.prefill->scaling() == Fp8Scaling::kDelayed;
  cuda::DeviceScaleBank* bank = nullptr;
  bool end_call = true;
  auto flush = [&] {
    if (tokens.empty()) return;
    m.prefill->run(tokens, reqs, st, bank, end_call);
    FUTR_CUDA_CHECK(
        cudaMemcpyAsync(m.h_nonfinite.get(), b.nonfinite.get(), sizeof(int), cudaMemcpyDeviceToHost, st));
    FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
    m.prefill->collect();  // the profile's intervals of this chunk (when profiling)
    if (m.h_nonfinite[0] != 0) {
      b.nonfinite.fill_bytes(0, st);
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
      fail(
          "GPU engine (prefill): a key or value row was not finite (the weights or the input produce "
          "NaN/Inf)");
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
        copy[size_t(j)] =
            row.out == RowOutput::kLogits ||
            (row.out == RowOutput::kToken && !table_.sampler(table_.slot(row.seq)).plain_greedy());
      }
      enqueue_prefill_outputs(nb);
      FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_stats.get(), b.row_stats.get(),
                                      size_t(nb) * sizeof(cuda::LogitsRowStats), cudaMemcpyDeviceToHost, st));
      for (int j = 0; j < nb; ++j)
        if (copy[size_t(j)]) {
          FUTR_CUDA_CHECK(cudaMemcpyAsync(m.h_logits.get() + size_t(j) * V, b.logits.get() + size_t(j) * V,
                                          V * sizeof(float), cudaMemcpyDeviceToHost, st));
          ++m.logits_rows_copied;
        }
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
      m.prefill_output_rows += nb;
      for (int j = 0; j < nb; ++j) {
        const int i = batch_row[size_t(out[b0 + size_t(j)])];
        const BatchRow& row = rows[size_t(i)];
        write_output(row, table_.slot(row.seq), rank[size_t(i)], j, copy[size_t(j)], false, r);
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
      reqs.push_back({take, rows[size_t(i)].pos, m.pool ? 0 : m.kv->slot_base(slot),
                      m.pool ? m.seq_blocks[size_t(slot)].table.data() : nullptr});
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

void GpuEngine::write_output(const BatchRow& row, int slot, int rank, int k, bool copied, bool drawn,
                             runtime::StepResult& r) {
  Impl& m = *impl_;
  const size_t V = size_t(lm_rows_);
  const cuda::LogitsRowStats& s = m.h_stats[size_t(k)];
  const float* z = m.h_logits.get() + size_t(k) * V;
  switch (row.out) {
    case RowOutput::kNone: break;
    case RowOutput::kLogits: std::memcpy(r.logits.row(rank), z, V * sizeof(float)); break;
    case RowOutput::kToken: {
      runtime::Sampler& sampler = table_.sampler(slot);
      int32_t t = 0;
      if (copied) {
        t = sampler.sample({z, V});
        ++m.host_sampled;
      } else if (drawn) {  // drawn by sample_topk; NaN/+inf or nothing drawable: the host's rule
        const int g = m.h_sampled[size_t(k)];
        t = s.nonfinite == 0 && g >= 0 ? g : sampler.sample({fetch_logits_row(k), V});
        ++m.gpu_sampled;
      } else if (s.nonfinite == 0 && s.argmax < sampleable_vocab_) {
        t = s.argmax;
      } else {
        // NaN/+inf, or the row's maximum on a padded LM-head row that no
        // token has (the reduce runs over all of them): the host's rule, which
        // draws from the sampleable ids only.
        t = sampler.sample({fetch_logits_row(k), V});
      }
      r.tokens[size_t(rank)] = t;
      break;
    }
    case RowOutput::kLogprob:
      // NaN/+inf in the row: what the host's token_nll gives (NaN), never a finite number.
      r.logprobs[size_t(rank)] =
          s.nonfinite == 0 ? s.logprob : -runtime::token_nll({fetch_logits_row(k), V}, row.target);
      break;
  }
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
  if (!m.pool) {
    run_rows(rows, plan, r);
    return r;
  }
  // A paged cache: every block the step takes, checked before any row runs;
  // then taken (copy-on-write copies enqueued before the rows that write);
  // after the rows (also when a row fails), the positions each sequence kept
  // are committed (their tokens recorded, full blocks indexed) and the blocks
  // past them go back.
  int64_t need = 0;
  for (const runtime::SeqRun& run : plan.runs)
    need += m.pool->blocks_needed(m.seq_blocks[size_t(table_.slot(run.seq))], run.end - run.begin);
  FUTR_CHECK(need <= m.pool->free_blocks(),
             "out of KV blocks: the step needs {} more blocks of {} positions, {} are free", need,
             m.pool->block_size(), m.pool->free_blocks());
  std::vector<int> len0(plan.runs.size());
  for (size_t k = 0; k < plan.runs.size(); ++k) {
    const runtime::SeqRun& run = plan.runs[k];
    const int slot = table_.slot(run.seq);
    len0[k] = table_.length(run.seq);
    std::optional<runtime::BlockCopy> copy;
    const bool grown = m.pool->grow(m.seq_blocks[size_t(slot)], run.end - run.begin, &copy);
    FUTR_ASSERT(grown);  // checked above
    if (copy) m.kv->copy_block(copy->src, copy->dst, m.stream);
  }
  auto commit = [&] {
    std::vector<int32_t> tokens;
    for (size_t k = 0; k < plan.runs.size(); ++k) {
      const runtime::SeqRun& run = plan.runs[k];
      const int slot = table_.slot(run.seq);
      const int kept = std::max(0, table_.length(run.seq) - len0[k]);
      tokens.clear();
      for (int i = run.begin; i < run.begin + kept; ++i) tokens.push_back(rows[size_t(i)].token);
      runtime::SequenceBlocks& sb = m.seq_blocks[size_t(slot)];
      m.pool->commit(sb, tokens);
      m.pool->truncate(sb, table_.length(run.seq));
    }
  };
  try {
    run_rows(rows, plan, r);
  } catch (...) {
    commit();
    throw;
  }
  commit();
  return r;
}

void GpuEngine::run_rows(std::span<const BatchRow> rows, const runtime::BatchPlan& plan,
                         runtime::StepResult& r) {
  Impl& m = *impl_;
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
    // sequence's draws happen in row order (the sampler's generator), unless
    // the sequence draws greedily: its draws are each row's argmax, in any
    // order, so a run of token rows (speculative decoding's draft rows) shares
    // the micro-step.
    take.assign(live.size(), 0);
    {
      int total = 0;
      auto token_ends_run = [&](const Cursor& l, int row) {
        if (rows[size_t(row)].out != RowOutput::kToken) return false;
        const runtime::SamplerConfig& sc = table_.sampler(l.slot).config();
        return !(sc.temperature == 0.0f && !runtime::uses_history(sc));
      };
      for (bool more = true; more && total < kMaxMicroBatch;) {
        more = false;
        for (size_t k = 0; k < live.size() && total < kMaxMicroBatch; ++k)
          if (live[k].next + take[k] < live[k].run->end && (take[k] > 0 || k < size_t(kMaxMicroBatch)) &&
              (take[k] == 0 || !token_ends_run(live[k], live[k].next + take[k] - 1))) {
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
      write_output(row, slot, rank[size_t(i)], int(k), micro[k].logits, micro[k].top_k > 0, r);
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
  j["kv_bytes"] = m.kv->bytes();
  if (m.pool) {
    const runtime::BlockPoolStats& b = m.pool->stats();
    j["kv_paged"] = {{"block_size", m.pool->block_size()},
                     {"blocks", m.pool->num_blocks()},
                     {"blocks_free", m.pool->free_blocks()},
                     {"blocks_used", m.pool->used_blocks()},
                     {"blocks_cached", m.pool->cached_blocks()},
                     {"blocks_attached", b.attached},
                     {"blocks_evicted", b.evicted},
                     {"block_copies", b.copies}};
  }
  j["weight_bytes"] = m.weights->int4_bytes() + m.weights->fp8_bytes();
  j["graphs"] = opt_.graphs;
  j["graphs_captured"] = m.exec->graphs_captured();
  j["micro_steps"] = m.micro_steps;
  j["graph_launches"] = m.exec->graph_launches();
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
    j["fp8"] = {{"calls", pf["fp8_calls"]},
                {"saturated_calls", pf["fp8_saturated_calls"]},
                {"saturated_values", pf["fp8_saturated_values"]},
                {"zero_calls", pf["fp8_zero_calls"]},
                {"max_amax", pf["fp8_max_amax"]},
                {"history", pf["fp8_history"]},
                {"margin", pf["fp8_margin"]},
                {"policy", pf["fp8_policy"]},
                {"scaling", pf["fp8_scaling"]},
                {"recomputes", 0}};
    j["prefill"] = pf;
  } else {
    j["prefill"] = nullptr;
  }
  if (m.prof && m.prof->units() > 0) {
    j["profile"] = m.prof->json("micro_step");
    j["profile"]["bucket"] = m.last_bucket;
    j["profile"]["plan"] = step_plan(m.last_bucket);  // the ops the rows above sum (step_plan.h)
  }
  return j;
}

nlohmann::json GpuEngine::step_plan(int bucket) const {
  const Impl& m = *impl_;
  const auto it = std::find(kBuckets.begin(), kBuckets.end(), bucket);
  FUTR_CHECK(it != kBuckets.end(), "step_plan: {} is not a bucket (1, 2, 4, 8, 16, 32)", bucket);
  const StepPlan& p = m.plans[size_t(it - kBuckets.begin())];
  nlohmann::json ops = nlohmann::json::array();
  for (const StepOp& op : p.ops) ops.push_back(StepPlan::describe(op));
  return ops;
}

GpuEngine::KvLayerDump GpuEngine::dump_kv_layer(int layer) const {
  const Impl& m = *impl_;
  FUTR_CHECK(layer >= 0 && layer < config_.n_layers, "dump_kv_layer: no layer {}", layer);
  FUTR_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const KvCache::Layer& L = m.kv->buffers(layer);
  KvLayerDump d;
  d.k = L.k.download(m.stream);
  d.v = L.v.download(m.stream);
  if (L.k4.size()) {
    d.k4 = L.k4.download(m.stream);
    d.v4 = L.v4.download(m.stream);
    d.ks = L.ks.download(m.stream);
    d.vs = L.vs.download(m.stream);
  }
  d.num_slots = m.kv->num_slots();
  d.slots_per_seq = m.kv->slots_per_seq();
  return d;
}

bool GpuEngine::set_profiling(bool on) {
  Impl& m = *impl_;
  if (m.prefill) m.prefill->set_profiling(on);
  if (on && m.prof) {  // on again: new sums, the same events (created on first use, outside later timings)
    m.prof->reset();
  } else if (on) {
    m.prof = std::make_unique<Profiler>(kBreakdownNames, true);
  } else {
    m.prof.reset();
  }
  return true;
}

}  // namespace futr::gpu
