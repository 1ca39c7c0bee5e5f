// FP32 KV storage and the KvCache bookkeeping (see kv_cache.h).
#include "cpu_engine/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace futr::cpu {

Fp32KvStorage::Fp32KvStorage(const ModelConfig& config, int capacity)
    : n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      capacity_(capacity) {
  FUTR_CHECK(capacity >= 1 && capacity <= (1 << 24),
             "KV cache: context length {} is out of range (1..16777216)", capacity);
  const double bytes = 2.0 * 4.0 * n_layers_ * n_kv_heads_ * double(capacity) * head_dim_;
  FUTR_CHECK(bytes < 64.0 * (1ull << 30),
             "KV cache: context {} needs {:.1f} GiB of FP32 cache; use a smaller --ctx", capacity,
             bytes / double(1ull << 30));
  const size_t n = size_t(n_layers_) * n_kv_heads_ * size_t(capacity) * head_dim_;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

int64_t Fp32KvStorage::offset(int layer, int head, int pos) const {
  return DenseKvShape{n_layers_, n_kv_heads_, capacity_, head_dim_}.offset(layer, head, pos);
}

void Fp32KvStorage::write(int layer, int pos, int n, const float* k, const float* v) {
  FUTR_ASSERT(layer >= 0 && layer < n_layers_ && pos >= 0 && n >= 0 && pos + n <= capacity_);
  const int kv_dim = n_kv_heads_ * head_dim_;
  // Scatter token-major rows [n, kv_heads * head_dim] into head-major storage.
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < n_kv_heads_; ++h) {
      const size_t src = size_t(i) * kv_dim + size_t(h) * head_dim_;
      const int64_t dst = offset(layer, h, pos + i);
      std::memcpy(&k_[size_t(dst)], k + src, sizeof(float) * size_t(head_dim_));
      std::memcpy(&v_[size_t(dst)], v + src, sizeof(float) * size_t(head_dim_));
    }
  }
}

KvLayerView dense_kv_view(const DenseKvShape& s, const float* k, const float* v, int layer, int len) {
  FUTR_ASSERT(layer >= 0 && layer < s.n_layers && len >= 0 && len <= s.capacity);
  KvLayerView view;
  view.len = len;
  view.heads.resize(size_t(s.n_kv_heads));
  for (int h = 0; h < s.n_kv_heads; ++h) {
    const int64_t o = s.offset(layer, h, 0);
    view.heads[size_t(h)] = {k + o, v + o, s.head_dim};
  }
  return view;
}

void dense_kv_copy(const DenseKvShape& s, float* k, float* v, int src, int dst, int n) {
  FUTR_ASSERT(n >= 0 && src >= 0 && dst >= 0 && src + n <= s.capacity && dst + n <= s.capacity &&
              (src + n <= dst || dst + n <= src));
  const size_t bytes = sizeof(float) * size_t(n) * size_t(s.head_dim);
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h) {
      std::memcpy(k + s.offset(l, h, dst), k + s.offset(l, h, src), bytes);
      std::memcpy(v + s.offset(l, h, dst), v + s.offset(l, h, src), bytes);
    }
}

void Fp32KvStorage::copy_rows(int src, int dst, int n) {
  dense_kv_copy({n_layers_, n_kv_heads_, capacity_, head_dim_}, k_.data(), v_.data(), src, dst, n);
}

KvLayerView Fp32KvStorage::read(int layer, int len) {
  return dense_kv_view({n_layers_, n_kv_heads_, capacity_, head_dim_}, k_.data(), v_.data(), layer, len);
}

KvCache::KvCache(std::unique_ptr<KvStorage> storage) : storage_(std::move(storage)) {
  FUTR_CHECK(storage_ != nullptr, "KV cache: no storage");
}

void KvCache::check_room(int n) const {
  FUTR_CHECK(n >= 0, "KV cache: negative token count {}", n);
  FUTR_CHECK(int64_t(length_) + n <= capacity(),
             "context length exceeded: {} tokens already in the KV cache + {} new > context {} "
             "(use a larger --ctx)",
             length_, n, capacity());
}

void KvCache::advance(int n) {
  check_room(n);
  length_ += n;
}

void KvCache::truncate(int len) {
  FUTR_CHECK(len >= 0 && len <= length_, "KV cache: cannot truncate {} positions to {}", length_, len);
  length_ = len;
}

std::unique_ptr<KvStorage> make_fp32_kv_storage(const ModelConfig& config, int capacity) {
  return std::make_unique<Fp32KvStorage>(config, capacity);
}

}  // namespace futr::cpu
