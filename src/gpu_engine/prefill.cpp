// The GPU engine's FP8 prefill path (see prefill.h).
#include "gpu_engine/prefill.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "gpu_engine/device_weights.h"
#include "gpu_engine/kv_cache.h"
#include "gpu_engine/profiler.h"
#include "kernels/layout/kv_cache.cuh"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_attention.h"
#include "launch/decode_ops.h"
#include "launch/fp8_gemm.h"
#include "launch/fp8_scaling.h"
#include "launch/prefill_attention.h"
#include "model/projection.h"

namespace futr::gpu {

namespace {

// The row map's arrays, one pinned host block and one device block (offsets in ints).
enum Map : int { kTok, kIdx, kPos, kBase, kMapRowArrays };

// The kinds of launch of a chunk, in order (the profile's rows).
enum Op : int {
  kGather,
  kQuantAttn,
  kQkv,
  kAppend,
  kAttention,
  kQuantO,
  kOProj,
  kQuantFfn,
  kGateUp,
  kDown,
  kUpdate,
  kOps
};
constexpr const char* kOpNames[kOps] = {"embedding gather",
                                        "fp8 quantize (attn in, rms in the cast)",
                                        "qkv gemm",
                                        "rope + kv append (+ int4 mirror)",
                                        "prefill attention",
                                        "fp8 quantize (o in)",
                                        "o gemm + residual",
                                        "fp8 quantize (ffn in, rms in the cast)",
                                        "gate/up gemm + swiglu + fp8",
                                        "down gemm + residual",
                                        "delayed-scaling update"};

}  // namespace

void PrefillPath::set_profiling(bool on) {
  if (on) prof_ = std::make_unique<Profiler>(kOpNames, false);
  else prof_.reset();
}

void PrefillPath::collect() {
  if (prof_) prof_->accumulate();
}

nlohmann::json PrefillPath::profile() const {
  if (!prof_ || prof_->units() == 0) return nullptr;
  nlohmann::json j = prof_->json("chunk");
  j["rows"] = prof_->rows;
  return j;
}

struct PrefillPath::Impl {
  std::unique_ptr<cuda::DeviceScaleBank> bank;
  // Activations of one chunk (max_rows rows).
  cuda::DeviceBuffer<uint16_t> x;     // [M][H] BF16 residual
  cuda::DeviceBuffer<uint8_t> a8;     // [M][max(H, q)] E4M3 GEMM input
  cuda::DeviceBuffer<uint16_t> qkv;   // [M][q + 2 kv] BF16
  cuda::DeviceBuffer<uint16_t> attn;  // [M][q] BF16
  cuda::DeviceBuffer<uint8_t> s8;     // [M][I] E4M3 (SwiGLU out)
  cuda::DeviceBuffer<float> sumsq;    // [M] the residual epilogues' row sums (unused here)
  // Row map: kMapRowArrays x [M], then the requests' row_begin / n_rows / pos0 /
  // slot_base ([M] each at most) and the tile list (2 ints per tile, <= 2M tiles).
  cuda::DeviceBuffer<int> map;
  int* h_map = nullptr;  // pinned, the same layout
  size_t map_ints = 0;
  // A paged cache: [requests][stride] the requests' block tables (grown on demand).
  cuda::DeviceBuffer<int> tables;
  int* h_tables = nullptr;  // pinned, the same layout
  size_t table_ints = 0;
  ~Impl() {
    if (h_map) cudaFreeHost(h_map);
    if (h_tables) cudaFreeHost(h_tables);
  }
};

std::string PrefillPath::unsupported_reason(const ModelConfig& c) {
  if (c.head_dim != 64 && c.head_dim != 128)
    return fmt::format("head_dim {} (the prefill attention has head_dim 64 and 128)", c.head_dim);
  if (c.hidden > 16384 || c.hidden % 16 != 0 || c.q_dim() > 16384 || c.q_dim() % 16 != 0)
    return fmt::format("hidden {} / query width {} (the FP8 quantizer needs multiples of 16 up to 16384)",
                       c.hidden, c.q_dim());
  if (c.intermediate % 16 != 0) return fmt::format("FFN width {} (a multiple of 16)", c.intermediate);
  return "";
}

PrefillPath::PrefillPath(const ModelConfig& c, const DeviceWeights& w, const KvCache& kv, int* nonfinite,
                         const quant::DelayedScalingConfig& scaling, int max_rows, CUstream_st* st)
    : c_(c), w_(w), kv_(kv), nonfinite_(nonfinite), max_rows_(max_rows), m_(std::make_unique<Impl>()) {
  const std::string why = unsupported_reason(c);
  FUTR_CHECK(why.empty(), "the FP8 prefill path does not support this model: {}", why);
  FUTR_CHECK(w.has_fp8() && w.n_layers() == c.n_layers && kv.n_layers() == c.n_layers,
             "prefill: the weights hold no FP8 projections of the model's {} layers", c.n_layers);
  quant::DelayedScalingConfig s = scaling;
  // Synthetic activations stay O(1) (x's RMS ~1, a few sigma): a small initial
  // amax. Real weights: the sites' stored (calibrated) amax where there is one.
  if (w.fp8_synthetic()) s.initial_amax = 64.0f;
  std::vector<float> initial(size_t(kInputSites) * size_t(c.n_layers), s.initial_amax);
  for (const auto& [site, amax] : w.fp8_initial_amax())
    if (site.layer >= 0 && site.layer < c.n_layers)
      initial[size_t(kInputSites * site.layer + int(site.site))] = amax;
  // The folded sites cast normalized rows (1/rms in the cast): their bound (quant/delayed_scaling.h).
  for (int l = 0; l < c.n_layers; ++l)
    for (InputSite si : {InputSite::kAttnIn, InputSite::kFfnIn})
      initial[size_t(kInputSites * l + int(si))] = quant::normalized_rows_amax_bound(c.hidden);
  allocate(s, initial, st);
}

PrefillPath::~PrefillPath() = default;

void PrefillPath::allocate(const quant::DelayedScalingConfig& scaling, std::span<const float> initial,
                           CUstream_st* st) {
  const ModelConfig& c = c_;
  FUTR_CHECK(max_rows_ >= 1 && max_rows_ <= (1 << 16), "prefill: {} rows per chunk (1..65536)", max_rows_);
  quant::DelayedScalingConfig s = scaling;
  s.policy = Fp8SaturationPolicy::kClampRescale;  // the device's policy (prefill.h)
  m_->bank = std::make_unique<cuda::DeviceScaleBank>(s, initial);
  const size_t M = size_t(max_rows_);
  m_->x = cuda::DeviceBuffer<uint16_t>(M * size_t(c.hidden));
  m_->a8 = cuda::DeviceBuffer<uint8_t>(M * size_t(std::max(c.hidden, c.q_dim())));
  m_->qkv = cuda::DeviceBuffer<uint16_t>(M * size_t(c.q_dim() + 2 * c.kv_dim()));
  m_->attn = cuda::DeviceBuffer<uint16_t>(M * size_t(c.q_dim()));
  m_->s8 = cuda::DeviceBuffer<uint8_t>(M * size_t(c.intermediate));
  m_->sumsq = cuda::DeviceBuffer<float>(M);
  m_->map_ints = M * kMapRowArrays + 4 * M + 4 * M;
  m_->map = cuda::DeviceBuffer<int>(m_->map_ints);
  FUTR_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&m_->h_map), m_->map_ints * sizeof(int)));
  FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  FUTR_CUDA_CHECK(cudaGetLastError());
}

size_t PrefillPath::weight_bytes() const { return w_.fp8_bytes(); }

const uint16_t* PrefillPath::x() const { return m_->x.get(); }

void PrefillPath::reset_state(CUstream_st* st) {
  m_->bank->reset(st);
  chunks_ = rows_ = 0;
}

std::unique_ptr<cuda::DeviceScaleBank> PrefillPath::new_bank() const {
  return std::make_unique<cuda::DeviceScaleBank>(m_->bank->config(), m_->bank->initial_amax());
}

Fp8Scaling PrefillPath::scaling() const { return m_->bank->config().scaling; }

std::vector<float> PrefillPath::calibrate(std::span<const int32_t> tokens, int window, int slot_base,
                                          CUstream_st* st) {
  FUTR_CHECK(window >= 1, "prefill calibration: window {} < 1", window);
  quant::DelayedScalingConfig dc = m_->bank->config();
  dc.scaling = Fp8Scaling::kDelayed;
  cuda::DeviceScaleBank cal(dc, m_->bank->initial_amax());
  for (size_t b = 0; b + size_t(window) <= tokens.size() || (b == 0 && !tokens.empty());
       b += size_t(window)) {
    const int n = int(std::min(tokens.size() - b, size_t(window)));
    for (int i = 0; i < n; i += max_rows_) {
      const int take = std::min(n - i, max_rows_);
      const Request q{take, i, slot_base};
      run(tokens.subspan(b + size_t(i), size_t(take)), std::span<const Request>(&q, 1), st, &cal);
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));  // run() reuses its pinned row map
    }
  }
  const std::vector<cuda::DeviceScaleBank::Snapshot> snap = cal.download(st);
  std::vector<float> initial(m_->bank->initial_amax().begin(), m_->bank->initial_amax().end());
  for (size_t s = 0; s < initial.size(); ++s) {
    const InputSite site = InputSite(int(s) % kInputSites);
    if ((site == InputSite::kOIn || site == InputSite::kDownIn) && snap[s].stats.max_amax > 0.0f &&
        std::isfinite(snap[s].stats.max_amax))
      initial[s] = snap[s].stats.max_amax;
  }
  m_->bank = std::make_unique<cuda::DeviceScaleBank>(m_->bank->config(), initial);
  chunks_ = rows_ = 0;
  return initial;
}

void PrefillPath::run(std::span<const int32_t> tokens, std::span<const Request> reqs, CUstream_st* st,
                      cuda::DeviceScaleBank* bank_in, bool update) {
  const ModelConfig& c = c_;
  Impl& m = *m_;
  cuda::DeviceScaleBank* const bank = bank_in ? bank_in : m.bank.get();
  const int M = int(tokens.size()), R = int(reqs.size());
  FUTR_CHECK(M >= 1 && M <= max_rows_ && R >= 1 && R <= M,
             "prefill: a chunk of {} rows in {} requests (1..{} rows)", M, R, max_rows_);
  const int H = c.hidden, D = c.head_dim, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
  const int qkv_n = Q + 2 * KV;
  // ---- the row map: per row (token, row index, position, slot base), per request, tiles ----------
  // A paged cache: the requests' block tables, one row each; the row map's
  // kBase entries then hold the row's request (the append's row_seq).
  const bool paged = reqs[0].blocks != nullptr;
  const size_t Mx = size_t(max_rows_);
  int* h = m.h_map;
  std::vector<cuda::PrefillRequest> pr;
  int row = 0;
  for (int r = 0; r < R; ++r) {
    const Request& q = reqs[size_t(r)];
    FUTR_CHECK(q.n_rows >= 1 && q.pos0 >= 0 && q.slot_base % layout::kKvSlotAlign == 0,
               "prefill: request of {} rows at position {}, slot base {}", q.n_rows, q.pos0, q.slot_base);
    pr.push_back({row, q.n_rows, q.pos0, q.slot_base});
    for (int i = 0; i < q.n_rows; ++i, ++row) {
      FUTR_CHECK(row < M, "prefill: the requests hold more rows than the {} tokens", M);
      h[kTok * Mx + size_t(row)] = tokens[size_t(row)];
      h[kIdx * Mx + size_t(row)] = row;
      h[kPos * Mx + size_t(row)] = q.pos0 + i;
      h[kBase * Mx + size_t(row)] = paged ? r : q.slot_base;
    }
  }
  FUTR_CHECK(row == M, "prefill: the requests hold {} rows, the chunk {} tokens", row, M);
  layout::KvBlockTable blocks;
  if (paged) {
    FUTR_CHECK(kv_.paged(), "prefill: block tables given for a contiguous KV cache");
    const int B = kv_.block_size();
    int stride = 1;
    for (const Request& q : reqs) {
      FUTR_CHECK(q.blocks != nullptr, "prefill: a chunk mixes paged and contiguous requests");
      stride = std::max(stride, (q.pos0 + q.n_rows + B - 1) / B);
    }
    const size_t need = size_t(R) * size_t(stride);
    if (need > m.table_ints) {
      if (m.h_tables) cudaFreeHost(m.h_tables);
      m.h_tables = nullptr;
      m.table_ints = std::max(need, 2 * m.table_ints);
      FUTR_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&m.h_tables), m.table_ints * sizeof(int)));
      m.tables = cuda::DeviceBuffer<int>(m.table_ints);
    }
    for (int r = 0; r < R; ++r) {
      const Request& q = reqs[size_t(r)];
      const int n = (q.pos0 + q.n_rows + B - 1) / B;
      std::copy(q.blocks, q.blocks + n, m.h_tables + size_t(r) * size_t(stride));
    }
    FUTR_CUDA_CHECK(
        cudaMemcpyAsync(m.tables.get(), m.h_tables, need * sizeof(int), cudaMemcpyHostToDevice, st));
    blocks = {m.tables.get(), stride, kv_.block_shift()};
  } else {
    FUTR_CHECK(
        !kv_.paged() || reqs.size() == 1,
        "prefill: contiguous requests in a paged cache (the warm-up and calibration) run one at a time");
    for (const Request& q : reqs)
      FUTR_CHECK(q.blocks == nullptr, "prefill: a chunk mixes paged and contiguous requests");
  }
  const std::vector<int> tiles = cuda::prefill_tiles(pr);
  const size_t req0 = kMapRowArrays * Mx, tiles0 = req0 + 4 * Mx;
  FUTR_ASSERT(tiles.size() <= 4 * Mx);
  for (int r = 0; r < R; ++r) {
    h[req0 + size_t(r)] = pr[size_t(r)].row_begin;
    h[req0 + Mx + size_t(r)] = pr[size_t(r)].n_rows;
    h[req0 + 2 * Mx + size_t(r)] = pr[size_t(r)].pos0;
    h[req0 + 3 * Mx + size_t(r)] = pr[size_t(r)].slot_base;
  }
  std::copy(tiles.begin(), tiles.end(), h + tiles0);
  FUTR_CUDA_CHECK(
      cudaMemcpyAsync(m.map.get(), h, (tiles0 + tiles.size()) * sizeof(int), cudaMemcpyHostToDevice, st));
  const int* d = m.map.get();
  const int *d_tok = d + kTok * Mx, *d_idx = d + kIdx * Mx, *d_pos = d + kPos * Mx, *d_base = d + kBase * Mx;
  Profiler* const prof = prof_.get();
  auto mark = [&](Op op) {
    if (prof) prof->mark(op, st);
  };
  if (prof) {
    prof->begin(st);  // the start, after the row map's copy
    prof->rows += M;
  }

  cuda::gather_rows(w_.embd(), d_tok, m.x.get(), M, H, st);
  mark(kGather);
  auto site = [&](int l, InputSite s) { return bank->site(kInputSites * l + int(s)); };
  // a8 = e4m3(y / s) of K-wide BF16 rows x (y = bf16(x / rms(x)) when fold_rms), recorded
  // into `st8`; returns its scale (the GEMM's A scale).
  auto quantize = [&](const uint16_t* x, int K, bool fold_rms, cuda::Fp8SiteState* st8, Op op) {
    cuda::Fp8QuantizeArgs qa;
    qa.x = x;
    qa.out = m.a8.get();
    qa.rows = M;
    qa.K = K;
    qa.fold_rms = fold_rms;
    qa.eps = c.rms_eps;
    qa.site = st8;
    cuda::fp8_quantize_rows(qa, st);
    mark(op);
    return &st8->scale;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const DeviceWeights::Fp8Layer& L = w_.fp8(l);
    const cuda::KvLayerPtrs cache = kv_.layer(l);
    // attention block: a8 = e4m3(bf16(x / rms(x)) / s); qkv = s b_s a8 Wqkv^T
    const float* s_attn = quantize(m.x.get(), H, true, site(l, InputSite::kAttnIn), kQuantAttn);
    cuda::ScaledOutArgs so;
    so.scales = {s_attn, L.qkv.scale.get()};
    so.out = m.qkv.get();
    cuda::gemm_scaled_out({m.a8.get(), L.qkv.w.get(), M, qkv_n, H}, so, st);
    mark(kQkv);
    // RoPE of q and k, K/V into the cache (BF16 + mirror): the decode append's bytes, many rows per CTA.
    cuda::KvAppendArgs ap;
    ap.k = m.qkv.get() + Q;
    ap.v = m.qkv.get() + Q + KV;
    ap.ld = qkv_n;
    ap.row_seq = paged ? d_base : d_idx;  // paged: the row's request (its table row)
    ap.row_pos = d_pos;
    ap.slot_base = paged ? nullptr : d_base;
    ap.blocks = blocks;
    ap.cache = cache;
    ap.rows = M;
    ap.kv_heads = c.n_kv_heads;
    ap.head_dim = D;
    ap.mirror = kv_.mirror();
    ap.rot_block = kv_.rot_block();
    ap.nonfinite = nonfinite_;
    ap.rope_cos = kv_.rope_cos();
    ap.rope_sin = kv_.rope_sin();
    ap.q = m.qkv.get();
    ap.q_heads = c.n_heads;
    const cuda::DeviceBuffer<float>& bias = w_.layer(l).qkv_bias;
    ap.bias = bias.size() ? bias.get() : nullptr;  // qwen2: the q/k/v biases, before RoPE
    cuda::kv_append_rows(ap, st);
    mark(kAppend);
    cuda::PrefillAttentionArgs aa;
    aa.q = m.qkv.get();
    aa.q_ld = qkv_n;
    aa.out = m.attn.get();
    aa.rows = M;
    aa.n_heads = c.n_heads;
    aa.kv_heads = c.n_kv_heads;
    aa.head_dim = D;
    aa.k = cache.k;
    aa.v = cache.v;
    aa.num_slots = cache.num_slots;
    aa.row_begin = d + req0;
    aa.n_rows = d + req0 + Mx;
    aa.pos0 = d + req0 + 2 * Mx;
    aa.slot_base = paged ? nullptr : d + req0 + 3 * Mx;
    aa.blocks = blocks;
    aa.tiles = d + tiles0;
    aa.n_tiles = int(tiles.size() / 2);
    cuda::prefill_attention(aa, st);
    mark(kAttention);
    // x = bf16(x + s b_s e4m3(o / s) Wo^T)
    const float* s_o = quantize(m.attn.get(), Q, false, site(l, InputSite::kOIn), kQuantO);
    cuda::ResidualSumSqArgs ro;
    ro.scales = {s_o, L.o.scale.get()};
    ro.residual = m.x.get();
    ro.out = m.x.get();
    ro.row_sumsq = m.sumsq.get();
    cuda::gemm_residual_sumsq({m.a8.get(), L.o.w.get(), M, H, Q}, ro, st);
    mark(kOProj);
    // MLP block: a8 = e4m3(bf16(x / rms(x)) / s); s8 = e4m3(silu(g) u / s_down); x += down
    const float* s_ffn = quantize(m.x.get(), H, true, site(l, InputSite::kFfnIn), kQuantFfn);
    cuda::Fp8SiteState* down = site(l, InputSite::kDownIn);
    cuda::SwiGluFp8Args sw;
    sw.scales = {s_ffn, L.gu.scale.get()};
    sw.out = m.s8.get();
    sw.scale_in = &down->scale;
    sw.amax_out = &down->amax;
    sw.saturation_out = &down->saturated;
    cuda::gemm_swiglu_fp8({m.a8.get(), L.gu.w.get(), M, 2 * I, H}, sw, st);
    mark(kGateUp);
    ro.scales = {&down->scale, L.down.scale.get()};
    cuda::gemm_residual_sumsq({m.s8.get(), L.down.w.get(), M, H, I}, ro, st);
    mark(kDown);
  }
  if (update) bank->update(0, kInputSites * c.n_layers, st);
  mark(kUpdate);
  ++chunks_;
  rows_ += M;
}

nlohmann::json PrefillPath::stats(CUstream_st* st, std::span<const cuda::DeviceScaleBank* const> more) const {
  std::vector<cuda::DeviceScaleBank::Snapshot> snap = m_->bank->download(st);
  for (const cuda::DeviceScaleBank* b : more) {
    const std::vector<cuda::DeviceScaleBank::Snapshot> s = b->download(st);
    snap.insert(snap.end(), s.begin(), s.end());
  }
  quant::ScaleStats t;
  float lo = std::numeric_limits<float>::infinity(), hi = 0;
  for (const auto& s : snap) {
    t += s.stats;
    lo = std::min(lo, s.scale);
    hi = std::max(hi, s.scale);
  }
  const quant::DelayedScalingConfig& cfg = m_->bank->config();
  return {{"chunks", chunks_},
          {"rows", rows_},
          {"max_rows", max_rows_},
          {"fp8_scaling", to_string(cfg.scaling)},
          {"fp8_sites", kInputSites * c_.n_layers},
          {"fp8_states", 1 + more.size()},
          {"fp8_history", cfg.history},
          {"fp8_margin", cfg.margin},
          {"fp8_policy", to_string(cfg.policy)},
          {"fp8_calls", t.calls},
          {"fp8_saturated_calls", t.saturated_calls},
          {"fp8_saturated_values", t.saturated_values},
          {"fp8_zero_calls", t.zero_calls},
          {"fp8_nonfinite_calls", t.nonfinite_calls},
          {"fp8_max_amax", t.max_amax},
          {"fp8_scale_min", snap.empty() ? 0.0f : lo},
          {"fp8_scale_max", hi},
          {"weight_bytes", weight_bytes()}};
}

}  // namespace futr::gpu
