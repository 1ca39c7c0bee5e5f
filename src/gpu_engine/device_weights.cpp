// The model's weights on the GPU (see device_weights.h).
#include "gpu_engine/device_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/numeric.h"
#include "launch/check.h"
#include "launch/fill.h"
#include "quant/int4_pack.h"
#include "quant/int4_quant.h"

namespace futr::gpu {

namespace {

std::vector<uint16_t> to_bf16(const Tensor& t) {
  std::vector<uint16_t> out(size_t(t.numel()));
  const float* p = t.ptr();
  for (size_t i = 0; i < out.size(); ++i) out[i] = float_to_bf16(p[i]);
  return out;
}

// The logical INT4 rows of `parts` stacked into one [sum n, k] matrix, packed
// (host work only: many run at once, see the constructor).
quant::Int4Packed pack_fused(const quant::QuantizedWeights& q, const std::vector<ProjId>& ids) {
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
    FUTR_CHECK(p.k == w.k && p.group == w.group,
               "GPU engine: {} (K {}, group {}) cannot be fused with K {}, group {}", name, p.k, p.group, w.k,
               w.group);
    w.n += p.n;
    w.q.insert(w.q.end(), p.q.begin(), p.q.end());
    w.scale.insert(w.scale.end(), p.scale.begin(), p.scale.end());
  }
  return quant::pack_int4(w);
}

// A random INT4 layer drawn on the device: nibbles uniform over 0..15 (values
// -8..7, standard deviation ~4.6) and FP16 group scales around
// 1 / (4.6 sqrt(K)), so y = x W^T has about x's RMS for any K: the residual
// stream of a synthetic model stays O(1) over 80 layers (no overflow, no NaN).
std::unique_ptr<cuda::W4Linear> synthetic_linear(int n, int k, uint64_t seed, int max_m, cudaStream_t s) {
  const int group = k % 128 == 0 ? 128 : 64;
  FUTR_CHECK(k % group == 0, "synthetic model: K {} is not a multiple of 64", k);
  auto w = std::make_unique<cuda::W4Linear>(n, k, group, max_m);
  cuda::fill_random(w->weights(), cuda::FillType::kU8, uint64_t(w->weight_bytes() - w->scale_bytes()), seed,
                    0, 0, s);
  const float s0 = 1.0f / (4.6f * std::sqrt(float(k)));
  cuda::fill_random(w->scales(), cuda::FillType::kF16, uint64_t(w->scale_bytes() / 2), seed + 1, 0.5f * s0,
                    1.5f * s0, s);
  return w;
}

using Fp8Matrix = DeviceWeights::Fp8Matrix;

// rows of `parts` stacked ([sum n][k]); interleave: row 2i of part 0, 2i+1 of part 1 (gate/up).
Fp8Matrix stack(const quant::QuantizedWeights& q, const std::vector<ProjId>& ids, bool folded,
                bool interleave) {
  Fp8Matrix m;
  std::vector<const quant::Fp8Weights*> parts;
  for (const ProjId& id : ids) {
    const quant::QuantizedTensor& t = q.at(id);
    const std::string name = projection_name(id);
    FUTR_CHECK(t.format == WeightFormat::kFp8, "prefill: {} is {}, not fp8", name, to_string(t.format));
    FUTR_CHECK(t.fp8.folded_gain == folded,
               "prefill: {} {} an RMSNorm gain folded in (the FP8 prefill path "
               "expects q/k/v and gate/up folded, o and down plain: quantize_model's fp8)",
               name, t.fp8.folded_gain ? "has" : "lacks");
    if (m.k == 0) m.k = t.fp8.k;
    FUTR_CHECK(t.fp8.k == m.k, "prefill: {} has K {}, expected {}", name, t.fp8.k, m.k);
    m.n += t.fp8.n;
    parts.push_back(&t.fp8);
  }
  std::vector<uint8_t> w(size_t(m.n) * size_t(m.k));
  std::vector<float> s(size_t(m.n));
  if (interleave) {
    FUTR_CHECK(parts.size() == 2 && parts[0]->n == parts[1]->n, "prefill: gate/up of different widths");
    for (int i = 0; i < parts[0]->n; ++i)
      for (int j = 0; j < 2; ++j) {
        const size_t dst = size_t(2 * i + j);
        std::copy_n(parts[size_t(j)]->w.begin() + ptrdiff_t(size_t(i) * m.k), m.k,
                    w.begin() + ptrdiff_t(dst * m.k));
        s[dst] = parts[size_t(j)]->scale[size_t(i)];
      }
  } else {
    size_t row = 0;
    for (const quant::Fp8Weights* p : parts) {
      std::copy(p->w.begin(), p->w.end(), w.begin() + ptrdiff_t(row * m.k));
      std::copy(p->scale.begin(), p->scale.end(), s.begin() + ptrdiff_t(row));
      row += size_t(p->n);
    }
  }
  m.w = cuda::DeviceBuffer<uint8_t>(w);
  m.scale = cuda::DeviceBuffer<float>(s);
  return m;
}

// Random E4M3 weights in [-1, 1) with per-channel scales ~ 1 / (0.58 sqrt(K))
// (uniform values have RMS 0.58): y = x W^T keeps x's RMS, as the synthetic INT4 layers.
Fp8Matrix synthetic_fp8(int n, int k, uint64_t seed, cudaStream_t st) {
  Fp8Matrix m;
  m.n = n, m.k = k;
  m.w = cuda::DeviceBuffer<uint8_t>(size_t(n) * size_t(k));
  m.scale = cuda::DeviceBuffer<float>(size_t(n));
  cuda::fill_random(m.w.get(), cuda::FillType::kE4M3, uint64_t(n) * uint64_t(k), seed, -1.0f, 1.0f, st);
  const float s0 = 1.0f / (0.58f * std::sqrt(float(k)));
  cuda::fill_random(m.scale.get(), cuda::FillType::kF32, uint64_t(n), seed + 1, 0.5f * s0, 1.5f * s0, st);
  return m;
}

}  // namespace

DeviceWeights::DeviceWeights(const Model& model, const ModelConfig& c, const quant::QuantizedWeights& q,
                             int lm_begin, int lm_rows, int max_m)
    : hidden_(c.hidden), lm_begin_(lm_begin), lm_rows_(lm_rows) {
  embd_ = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.tok_embd));
  if (!model.weights.lm_head.empty()) {  // the rows [lm_begin, lm_begin + lm_rows) (all without TP)
    const Tensor& h = model.weights.lm_head;
    std::vector<uint16_t> rows(size_t(lm_rows) * size_t(c.hidden));
    const float* src = h.ptr() + size_t(lm_begin) * size_t(c.hidden);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = float_to_bf16(src[i]);
    lm_head_ = cuda::DeviceBuffer<uint16_t>(rows);
  }
  out_norm_ = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.out_norm));
  layers_.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[size_t(l)];
    L.attn_norm = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.layers[size_t(l)].attn_norm));
    L.ffn_norm = cuda::DeviceBuffer<uint16_t>(to_bf16(model.weights.layers[size_t(l)].ffn_norm));
    const LayerWeights& W = model.weights.layers[size_t(l)];
    if (c.qkv_bias) {  // q|k|v in FP32, as the CPU engines keep them
      FUTR_CHECK(W.bq.numel() == c.q_dim() && W.bk.numel() == c.kv_dim() && W.bv.numel() == c.kv_dim(),
                 "layer {}: the q/k/v biases have {} / {} / {} values, the shapes need {} / {} / {}", l,
                 W.bq.numel(), W.bk.numel(), W.bv.numel(), c.q_dim(), c.kv_dim(), c.kv_dim());
      std::vector<float> b;
      for (const Tensor* t : {&W.bq, &W.bk, &W.bv}) b.insert(b.end(), t->ptr(), t->ptr() + t->numel());
      L.qkv_bias = cuda::DeviceBuffer<float>(b);
    }
  }
  // The four fused matrices of every layer: packed into the kernels' layout
  // on the host's cores (the packing is per element; one core took ~0.8 s for
  // a 135M model), a window of matrices at a time (host memory stays bounded),
  // then uploaded in order.
  struct Job {
    int layer, slot;  // slot: 0 qkv, 1 o, 2 gate_up, 3 down
    std::vector<ProjId> ids;
  };
  std::vector<Job> jobs;
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<ProjId> n;  // q k v o gate up down
    for (Projection p : kLayerProjections) n.push_back({l, p});
    jobs.push_back({l, 0, {n[0], n[1], n[2]}});
    jobs.push_back({l, 1, {n[3]}});
    jobs.push_back({l, 2, {n[4], n[5]}});
    jobs.push_back({l, 3, {n[6]}});
  }
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  for (size_t w0 = 0; w0 < jobs.size(); w0 += 2 * threads) {
    const size_t w1 = std::min(jobs.size(), w0 + 2 * threads);
    std::vector<quant::Int4Packed> packed(w1 - w0);
    std::vector<std::exception_ptr> errors(w1 - w0);
    std::atomic<size_t> next{w0};
    auto work = [&] {
      for (size_t j; (j = next.fetch_add(1)) < w1;) {
        try {
          packed[j - w0] = pack_fused(q, jobs[j].ids);
        } catch (...) {
          errors[j - w0] = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < std::min(threads, w1 - w0); ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t j = w0; j < w1; ++j) {
      const quant::Int4Packed& p = packed[j - w0];
      Layer& L = layers_[size_t(jobs[j].layer)];
      std::unique_ptr<cuda::W4Linear>* slots[4] = {&L.qkv, &L.o, &L.gate_up, &L.down};
      *slots[jobs[j].slot] = std::make_unique<cuda::W4Linear>(p.n, p.k, p.group, p.weights, p.scales, max_m);
    }
  }
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceWeights::DeviceWeights(const ModelConfig& c, uint64_t seed, int lm_begin, int lm_rows, int max_m,
                             cudaStream_t st)
    : hidden_(c.hidden), lm_begin_(lm_begin), lm_rows_(lm_rows) {
  const int H = c.hidden;
  uint64_t sd = seed * 0x9e3779b97f4a7c15ull + 17;
  auto next = [&] { return sd += 0x632be59bd9b4e019ull; };
  auto bf16 = [&](size_t n, float lo, float hi) {
    cuda::DeviceBuffer<uint16_t> b(n);
    cuda::fill_random(b.get(), cuda::FillType::kBF16, n, next(), lo, hi, st);
    return b;
  };
  embd_ = bf16(size_t(c.vocab) * H, -1.0f, 1.0f);
  // The head's rows of RMS ~1/sqrt(H) give logits of RMS ~1 for normalized inputs.
  const float head = std::sqrt(3.0f / float(H));
  if (!c.tied_embeddings) {
    lm_head_ = bf16(size_t(c.vocab) * H, -head, head);  // the whole head: every rank draws the same one
    if (lm_rows < c.vocab) {                            // then keeps its rows [lm_begin, + lm_rows)
      cuda::DeviceBuffer<uint16_t> rows(size_t(lm_rows) * H);
      FUTR_CUDA_CHECK(cudaMemcpyAsync(rows.get(), lm_head_.get() + size_t(lm_begin) * H,
                                      rows.size() * sizeof(uint16_t), cudaMemcpyDeviceToDevice, st));
      FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
      lm_head_ = std::move(rows);
    }
  }
  out_norm_ = bf16(size_t(H), 0.8f, 1.2f);
  layers_.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[size_t(l)];
    L.attn_norm = bf16(size_t(H), 0.8f, 1.2f);
    L.ffn_norm = bf16(size_t(H), 0.8f, 1.2f);
    L.qkv = synthetic_linear(c.q_dim() + 2 * c.kv_dim(), H, next(), max_m, st);
    L.o = synthetic_linear(H, c.q_dim(), next(), max_m, st);
    L.gate_up = synthetic_linear(2 * c.intermediate, H, next(), max_m, st);
    L.down = synthetic_linear(H, c.intermediate, next(), max_m, st);
    if (c.qkv_bias) {
      L.qkv_bias = cuda::DeviceBuffer<float>(size_t(c.q_dim() + 2 * c.kv_dim()));
      cuda::fill_random(L.qkv_bias.get(), cuda::FillType::kF32, L.qkv_bias.size(), next(), -0.5f, 0.5f, st);
    }
  }
  FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  FUTR_CUDA_CHECK(cudaGetLastError());
}

void DeviceWeights::load_fp8(const ModelConfig& c, const quant::QuantizedWeights& fp8) {
  FUTR_CHECK(fp8.format == WeightFormat::kFp8, "prefill: weights of format {}, not fp8",
             to_string(fp8.format));
  std::vector<Fp8Layer> layers;
  for (int l = 0; l < c.n_layers; ++l) {
    Fp8Layer L;
    auto id = [&](Projection p) { return ProjId{l, p}; };
    L.qkv = stack(fp8, {id(Projection::kQ), id(Projection::kK), id(Projection::kV)}, true, false);
    L.o = stack(fp8, {id(Projection::kO)}, false, false);
    L.gu = stack(fp8, {id(Projection::kGate), id(Projection::kUp)}, true, true);
    L.down = stack(fp8, {id(Projection::kDown)}, false, false);
    layers.push_back(std::move(L));
  }
  fp8_ = std::move(layers);
  fp8_synthetic_ = false;
  fp8_initial_amax_ = fp8.fp8_initial_amax;
}

void DeviceWeights::draw_fp8(const ModelConfig& c, uint64_t seed, cudaStream_t st) {
  std::vector<Fp8Layer> layers;
  uint64_t sd = seed * 0x2545f4914f6cdd1dull + 101;
  auto next = [&] { return sd += 0x9e3779b97f4a7c15ull; };
  for (int l = 0; l < c.n_layers; ++l) {
    Fp8Layer L;
    L.qkv = synthetic_fp8(c.q_dim() + 2 * c.kv_dim(), c.hidden, next(), st);
    L.o = synthetic_fp8(c.hidden, c.q_dim(), next(), st);
    L.gu = synthetic_fp8(2 * c.intermediate, c.hidden, next(), st);
    L.down = synthetic_fp8(c.hidden, c.intermediate, next(), st);
    layers.push_back(std::move(L));
  }
  fp8_ = std::move(layers);
  fp8_synthetic_ = true;
  fp8_initial_amax_.clear();
}

void DeviceWeights::quantize_lm_head_int4(int group, cudaStream_t st) {
  const size_t n = size_t(lm_rows_) * size_t(hidden_);
  std::vector<float> w(n);
  {
    std::vector<uint16_t> bf(n);
    FUTR_CUDA_CHECK(
        cudaMemcpyAsync(bf.data(), lm_head_rows(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost, st));
    FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
    for (size_t i = 0; i < n; ++i) w[i] = bf16_to_float(bf[i]);
  }
  const quant::Int4Weights q =
      quant::quantize_int4(w, lm_rows_, hidden_, group, quant::ClipSearch{}, {}, "lm_head");
  const quant::Int4Packed p = quant::pack_int4(q);
  lm_int4_w_ = cuda::DeviceBuffer<uint8_t>(p.weights, st);
  lm_int4_s_ = cuda::DeviceBuffer<uint16_t>(p.scales, st);
  FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
  lm_int4_group_ = group;
}

const uint16_t* DeviceWeights::lm_head_rows() const {
  return lm_head_.size() ? lm_head_.get() : embd_.get() + size_t(lm_begin_) * size_t(hidden_);
}

size_t DeviceWeights::int4_bytes() const {
  size_t b = 0;
  for (const Layer& L : layers_)
    b += L.qkv->weight_bytes() + L.o->weight_bytes() + L.gate_up->weight_bytes() + L.down->weight_bytes();
  return b;
}

size_t DeviceWeights::fp8_bytes() const {
  size_t b = 0;
  for (const Fp8Layer& L : fp8_) b += L.qkv.bytes() + L.o.bytes() + L.gu.bytes() + L.down.bytes();
  return b;
}

}  // namespace futr::gpu
