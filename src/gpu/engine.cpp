// The GPU engine's decode path (see engine.h).
#include "gpu/engine.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "model/projection.h"
#include "core/numeric.h"
#include "model/rope.h"
#include "cuda/buffer.h"
#include "cuda/check.h"
#include "cuda/cublaslt.h"
#include "cuda/decode_attention.h"
#include "cuda/decode_ops.h"
#include "cuda/device.h"
#include "cuda/linear.h"
#include "cuda/stream.h"
#include "device/layout/kv_cache.cuh"
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
  cuda::DeviceBuffer<float> rope_cos, rope_sin;  // [ctx][D/2]
  std::vector<Layer> layers;
  // Activations of one micro-step (kMaxMicroBatch rows).
  cuda::DeviceBuffer<float> x;        // [B][H] FP32 residual
  cuda::DeviceBuffer<uint16_t> a;     // [B][H] BF16 GEMM input
  cuda::DeviceBuffer<uint16_t> qkv;   // [B][q + 2 kv]
  cuda::DeviceBuffer<uint16_t> attn;  // [B][q]
  cuda::DeviceBuffer<uint16_t> y;     // [B][H]
  cuda::DeviceBuffer<uint16_t> gu;    // [B][2I]
  cuda::DeviceBuffer<uint16_t> sw;    // [B][I]
  cuda::DeviceBuffer<float> logits;   // [B][vocab]
  cuda::DeviceBuffer<int> ints;       // [5][B]: tokens, positions, slot bases, kv lengths, row index
  cuda::DeviceBuffer<int> nonfinite;  // [1] append's count of non-finite K/V rows
  cuda::DeviceBuffer<float> attn_ws;
  cuda::DeviceBuffer<int> attn_counters;
  std::vector<cuda::AttentionConfig> attn_cfg;  // [B] for B = 1..kMaxMicroBatch (index B - 1)
  int num_slots = 0, slots_per_seq = 0;
  size_t kv_bytes = 0, weight_bytes = 0;
};

GpuEngine::GpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                     const GpuEngineOptions& o)
    : model_(model), opt_(o), impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = model.config;
  const cuda::DeviceInfo& dev = cuda::require_device();
  FUTR_CHECK(q && q->format == WeightFormat::kInt4,
             "GPU engine: runs INT4 weights (--weights int4, or a .futr file with INT4 weights)");
  FUTR_CHECK(o.kv == KvFormat::kBf16 || o.kv == KvFormat::kInt4 || o.kv == KvFormat::kInt4Rot,
             "GPU engine: KV cache {} is not supported (bf16, int4, int4-rot)", to_string(o.kv));
  FUTR_CHECK(o.max_seqs >= 1 && o.max_seqs <= 4096, "the maximum number of sequences must be in 1..4096 (got {})",
             o.max_seqs);
  FUTR_CHECK(o.max_step_tokens >= 1 && o.max_step_tokens <= (1 << 20),
             "the maximum tokens per step must be in 1..1048576 (got {})", o.max_step_tokens);
  FUTR_CHECK(c.n_heads % c.n_kv_heads == 0, "GPU engine: {} heads over {} KV heads", c.n_heads, c.n_kv_heads);
  opt_.ctx = o.ctx > 0 ? o.ctx : c.max_context;
  FUTR_CHECK(opt_.ctx >= 1 && opt_.ctx <= (1 << 22), "--ctx {} out of range 1..4194304", opt_.ctx);
  const bool int4 = o.kv != KvFormat::kBf16;
  const int rot = o.kv == KvFormat::kInt4Rot ? o.kv_block : 0;
  // Refuse what the kernels do not compile before allocating anything.
  cuda::AttentionShape shape{1, c.n_kv_heads, c.n_heads / c.n_kv_heads, c.head_dim, int4, rot, opt_.ctx};
  cuda::attention_heuristic(shape, dev.sm_count);

  Impl& m = *impl_;
  const int H = c.hidden, D = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), I = c.intermediate;
  const int B = kMaxMicroBatch;

  // ---- KV cache: does it fit? ----------------------------------------------------
  m.slots_per_seq = (opt_.ctx + layout::kKvSlotAlign - 1) / layout::kKvSlotAlign * layout::kKvSlotAlign;
  const int64_t all_slots = int64_t(m.slots_per_seq) * o.max_seqs;
  FUTR_CHECK(all_slots <= (int64_t(1) << 30), "GPU engine: {} sequences x ctx {} = {} KV slots, more than the "
             "cache addresses (2^30); what fits: fewer sequences or a smaller --ctx", o.max_seqs, opt_.ctx, all_slots);
  m.num_slots = int(all_slots);
  const size_t per_slot = size_t(c.n_layers) * c.n_kv_heads *
                          (size_t(D) * 2 * 2 + (int4 ? size_t(D) + 8 : 0));  // BF16 K+V, + nibbles and scales
  m.kv_bytes = per_slot * size_t(m.num_slots);
  size_t free_b = 0, total_b = 0;
  FUTR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  size_t weights_est = 0;
  for (const auto& [name, t] : q->tensors) weights_est += size_t(t.n) * t.k / 2 + size_t(t.n) * (t.k / t.int4.group) * 2;
  weights_est += size_t(c.vocab) * H * 2 * (c.tied_embeddings ? 1 : 2);
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

  // ---- weights --------------------------------------------------------------------
  m.embd = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.tok_embd));
  if (!model.weights.lm_head.empty()) m.lm_head = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.lm_head));
  m.out_norm = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.out_norm));
  m.layers.resize(size_t(c.n_layers));
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
  const RopeTable rope = make_rope_table(D, c.rope_theta, c.rope_scaling, opt_.ctx);
  m.rope_cos = cuda::DeviceBuffer<float>(rope.cos);
  m.rope_sin = cuda::DeviceBuffer<float>(rope.sin);

  // ---- activations and workspaces --------------------------------------------------
  m.x = cuda::DeviceBuffer<float>(size_t(B) * H);
  m.a = cuda::DeviceBuffer<uint16_t>(size_t(B) * H);
  m.qkv = cuda::DeviceBuffer<uint16_t>(size_t(B) * (q_dim + 2 * kv_dim));
  m.attn = cuda::DeviceBuffer<uint16_t>(size_t(B) * q_dim);
  m.y = cuda::DeviceBuffer<uint16_t>(size_t(B) * H);
  m.gu = cuda::DeviceBuffer<uint16_t>(size_t(B) * 2 * I);
  m.sw = cuda::DeviceBuffer<uint16_t>(size_t(B) * I);
  m.logits = cuda::DeviceBuffer<float>(size_t(B) * c.vocab);
  m.ints = cuda::DeviceBuffer<int>(size_t(5) * B);
  m.nonfinite = cuda::DeviceBuffer<int>(1);
  m.nonfinite.fill_bytes(0);
  size_t ws = 1;
  for (int b = 1; b <= B; ++b) {
    shape.batch = b;
    m.attn_cfg.push_back(cuda::attention_heuristic(shape, dev.sm_count));
    ws = std::max(ws, cuda::attention_workspace_floats(shape, m.attn_cfg.back()));
  }
  shape.batch = B;
  m.attn_ws = cuda::DeviceBuffer<float>(ws);
  m.attn_counters = cuda::DeviceBuffer<int>(cuda::attention_counters(shape));
  m.attn_counters.fill_bytes(0);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());

  host_logits_.resize(size_t(B) * c.vocab);
  slots_.resize(size_t(o.max_seqs));
  info_.name = "gpu";
  info_.describe = fmt::format(
      "gpu ({}, {} SMs; int4 weights {:.1f} MiB ({}), KV {}{} {:.1f} MiB, ctx {} x {} sequences; prompts run "
      "through the decode step one position at a time)",
      dev.name, dev.sm_count, double(m.weight_bytes) / (1 << 20), q->method, to_string(o.kv),
      rot ? fmt::format(" (Hadamard block {})", rot) : "", double(m.kv_bytes) / (1 << 20), opt_.ctx, o.max_seqs);
  info_.vocab = c.vocab;
  info_.ctx = opt_.ctx;
  info_.max_seqs = o.max_seqs;
  info_.max_step_tokens = o.max_step_tokens;
  info_.weights = WeightFormat::kInt4;
  info_.kv = o.kv;
}

GpuEngine::~GpuEngine() = default;

GpuEngine::Slot& GpuEngine::slot_of(SeqId id) {
  const auto it = index_.find(id);
  FUTR_CHECK(it != index_.end(), "sequence {} is not open", id);
  return slots_[size_t(it->second)];
}
const GpuEngine::Slot& GpuEngine::slot_of(SeqId id) const {
  const auto it = index_.find(id);
  FUTR_CHECK(it != index_.end(), "sequence {} is not open", id);
  return slots_[size_t(it->second)];
}

void GpuEngine::open(SeqId id, const runtime::SamplerConfig& sampling) {
  FUTR_CHECK(!is_open(id), "sequence {} is already open", id);
  FUTR_CHECK(free_sequences() > 0, "cannot open sequence {}: all {} sequences are in use", id, info_.max_seqs);
  runtime::Sampler sampler(sampling);  // validates before anything changes
  sampler.limit_vocab(model_.sampleable_vocab());  // padded LM-head rows are never drawn
  size_t s = 0;
  while (slots_[s].open) ++s;
  slots_[s].sampler.emplace(std::move(sampler));
  slots_[s].len = 0;
  slots_[s].open = true;
  index_.emplace(id, int(s));
}

void GpuEngine::truncate(SeqId id, int len) {
  Slot& s = slot_of(id);
  FUTR_CHECK(len >= 0 && len <= s.len, "cannot truncate sequence {} of {} positions to {}", id, s.len, len);
  s.len = len;  // the cache rows past len are overwritten before they are read again
}

void GpuEngine::close(SeqId id) {
  Slot& s = slot_of(id);
  s.sampler.reset();
  s.len = 0;
  s.open = false;
  index_.erase(id);
}

int GpuEngine::length(SeqId id) const { return slot_of(id).len; }

int64_t GpuEngine::free_positions() const {
  int64_t free = int64_t(free_sequences()) * info_.ctx;
  for (const auto& [id, s] : index_) free += info_.ctx - slots_[size_t(s)].len;
  return free;
}

void GpuEngine::micro_step(const std::vector<int>& tokens, const std::vector<int>& slots, const std::vector<int>& pos) {
  Impl& m = *impl_;
  const ModelConfig& c = model_.config;
  const int B = int(tokens.size()), Bm = kMaxMicroBatch;
  const int H = c.hidden, D = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), I = c.intermediate;
  const int qkv_n = q_dim + 2 * kv_dim;
  cudaStream_t st = m.stream;
  // ---- the row map: tokens, positions, slot bases, lengths, row index -----------------
  std::vector<int> h(size_t(5) * Bm, 0);
  for (int i = 0; i < B; ++i) {
    h[size_t(i)] = tokens[size_t(i)];
    h[size_t(Bm + i)] = pos[size_t(i)];
    h[size_t(2 * Bm + i)] = slots[size_t(i)] * m.slots_per_seq;
    h[size_t(3 * Bm + i)] = pos[size_t(i)] + 1;
    h[size_t(4 * Bm + i)] = i;
  }
  FUTR_CUDA_CHECK(cudaMemcpyAsync(m.ints.get(), h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice, st));
  const int* d_tok = m.ints.get();
  const int* d_pos = d_tok + Bm;
  const int* d_base = d_tok + 2 * Bm;
  const int* d_len = d_tok + 3 * Bm;
  const int* d_row = d_tok + 4 * Bm;
  const bool int4 = opt_.kv != KvFormat::kBf16;
  const int rot = opt_.kv == KvFormat::kInt4Rot ? opt_.kv_block : 0;

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
  cuda::rmsnorm(norm, st);
  norm.tokens = nullptr;
  norm.add = m.y.get();
  norm.ld_add = H;

  const cuda::AttentionShape shape{B, c.n_kv_heads, c.n_heads / c.n_kv_heads, D, int4, rot, opt_.ctx};
  for (int l = 0; l < c.n_layers; ++l) {
    Impl::Layer& L = m.layers[size_t(l)];
    const cuda::KvLayerPtrs cache = L.ptrs(m.num_slots);
    L.qkv->forward(m.a.get(), m.qkv.get(), B, st);
    cuda::rope(m.qkv.get(), qkv_n, d_pos, m.rope_cos.get(), m.rope_sin.get(), B, c.n_heads + c.n_kv_heads, D, st);
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
    cuda::kv_append(ap, st);
    cuda::AttentionArgs aa{m.qkv.get(), m.attn.get(), d_base, d_len, cache, m.attn_ws.get(), m.attn_ws.size(),
                           m.attn_counters.get(), m.attn_counters.size(), qkv_n};
    cuda::decode_attention(shape, aa, m.attn_cfg[size_t(B - 1)], st);
    L.o->forward(m.attn.get(), m.y.get(), B, st);
    norm.gain = L.ffn_norm.get();
    cuda::rmsnorm(norm, st);  // x += o; a = RMSNorm(x) g_ffn
    L.gate_up->forward(m.a.get(), m.gu.get(), B, st);
    cuda::swiglu(m.gu.get(), m.sw.get(), B, I, st);
    L.down->forward(m.sw.get(), m.y.get(), B, st);
    norm.gain = l + 1 < c.n_layers ? m.layers[size_t(l + 1)].attn_norm.get() : m.out_norm.get();
    cuda::rmsnorm(norm, st);  // x += down; a = RMSNorm(x) g_next
  }
  const uint16_t* lm = m.lm_head.size() ? m.lm_head.get() : m.embd.get();
  m.lt.matmul(cuda::LtInput::kBF16, m.a.get(), lm, m.logits.get(), B, c.vocab, H, nullptr, nullptr, st,
              cuda::LtOutput::kF32);
  FUTR_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), m.logits.get(), size_t(B) * c.vocab * sizeof(float),
                                  cudaMemcpyDeviceToHost, st));
  int nonfinite = 0;
  FUTR_CUDA_CHECK(cudaMemcpyAsync(&nonfinite, m.nonfinite.get(), sizeof(int), cudaMemcpyDeviceToHost, st));
  FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  if (nonfinite != 0) m.nonfinite.fill_bytes(0);
  FUTR_CHECK(nonfinite == 0, "GPU engine: a key or value row was not finite (the weights or the input produce "
             "NaN/Inf)");
}

runtime::StepResult GpuEngine::step(std::span<const BatchRow> rows) {
  const runtime::BatchPlan plan = runtime::plan_batch(rows, info_, [&](SeqId id) {
    const auto it = index_.find(id);
    return it == index_.end() ? -1 : slots_[size_t(it->second)].len;
  });
  const size_t V = size_t(info_.vocab);
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
  for (const runtime::SeqRun& run : plan.runs) live.push_back({&run, run.begin, index_.at(run.seq)});
  std::vector<int> tokens, slots, pos, which;
  while (!live.empty()) {
    tokens.clear(), slots.clear(), pos.clear(), which.clear();
    for (size_t k = 0; k < live.size() && k < size_t(kMaxMicroBatch); ++k) {
      const BatchRow& row = rows[size_t(live[k].next)];
      tokens.push_back(row.token);
      slots.push_back(live[k].slot);
      pos.push_back(row.pos);
      which.push_back(live[k].next);
    }
    micro_step(tokens, slots, pos);
    for (size_t k = 0; k < which.size(); ++k) {
      const int i = which[k];
      const BatchRow& row = rows[size_t(i)];
      Slot& s = slots_[size_t(slots[k])];
      s.len = row.pos + 1;
      const std::span<const float> z(host_logits_.data() + k * V, V);
      switch (row.out) {
        case RowOutput::kNone: break;
        case RowOutput::kLogits: std::memcpy(r.logits.row(rank[size_t(i)]), z.data(), V * sizeof(float)); break;
        case RowOutput::kToken: r.tokens[size_t(rank[size_t(i)])] = s.sampler->sample(z); break;
        case RowOutput::kLogprob: r.logprobs[size_t(rank[size_t(i)])] = -runtime::token_nll(z, row.target); break;
      }
    }
    // Advance the cursors of this micro-step's runs; drop the finished ones.
    const size_t taken = which.size();
    for (size_t k = 0; k < taken; ++k) ++live[k].next;
    std::vector<Cursor> rest;
    for (size_t k = 0; k < live.size(); ++k)
      if (live[k].next < live[k].run->end) rest.push_back(live[k]);
    // Runs not in this micro-step keep their order, after the ones that were.
    live.swap(rest);
  }
  return r;
}

nlohmann::json GpuEngine::stats() const {
  nlohmann::json j;
  int64_t used = 0;
  for (const auto& [id, s] : index_) used += slots_[size_t(s)].len;
  j["engine"] = info_.name;
  j["weights"] = to_string(info_.weights);
  j["kv"] = to_string(info_.kv);
  j["sequences_open"] = index_.size();
  j["max_seqs"] = info_.max_seqs;
  j["ctx"] = info_.ctx;
  j["kv_positions_used"] = used;
  j["kv_positions_free"] = free_positions();
  j["kv_bytes"] = impl_->kv_bytes;
  j["weight_bytes"] = impl_->weight_bytes;
  return j;
}

}  // namespace futr::gpu
