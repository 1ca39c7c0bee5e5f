// The paged KV cache of the CPU engines (see paged_kv.h).
#include "cpu_engine/paged_kv.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace futr::cpu {

PagedKvPool::PagedKvPool(const ModelConfig& config, std::unique_ptr<KvStorage> slots, int block_size)
    : n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      block_size_(block_size),
      slots_(std::move(slots)) {
  FUTR_CHECK(slots_ != nullptr, "paged KV cache: no storage");
  FUTR_CHECK(block_size_ >= 1 && slots_->capacity() % block_size_ == 0,
             "paged KV cache: {} slots are not whole blocks of {}", slots_->capacity(), block_size_);
}

void PagedKvPool::copy_block(const runtime::BlockCopy& c) {
  FUTR_ASSERT(c.src >= 0 && c.dst >= 0 && c.src < num_blocks() && c.dst < num_blocks() && c.src != c.dst &&
              c.rows >= 0 && c.rows <= block_size_);
  slots_->copy_rows(c.src * block_size_, c.dst * block_size_, c.rows);
}

KvLayerView PagedKvPool::gather(std::span<const runtime::BlockId> table, int layer, int len) {
  const int B = block_size_, D = head_dim_;
  FUTR_ASSERT(len >= 0 && int64_t(table.size()) * B >= len);
  const KvLayerView all = slots_->read(layer, slots_->capacity());
  const size_t head_floats = size_t(len) * size_t(D);
  if (k_.size() < head_floats * size_t(n_kv_heads_)) {
    k_.resize(head_floats * size_t(n_kv_heads_));
    v_.resize(head_floats * size_t(n_kv_heads_));
  }
  KvLayerView view;
  view.len = len;
  view.heads.resize(size_t(n_kv_heads_));
  for (int h = 0; h < n_kv_heads_; ++h) {
    const KvHeadView& src = all.heads[size_t(h)];
    float* kd = k_.data() + size_t(h) * head_floats;
    float* vd = v_.data() + size_t(h) * head_floats;
    for (int p = 0; p < len; p += B) {
      const int rows = std::min(B, len - p);
      const int64_t slot = int64_t(table[size_t(p / B)]) * B;
      if (src.ld == D) {  // a block's rows of one head are contiguous: one copy
        std::memcpy(kd + size_t(p) * D, src.k + slot * D, sizeof(float) * size_t(rows) * D);
        std::memcpy(vd + size_t(p) * D, src.v + slot * D, sizeof(float) * size_t(rows) * D);
      } else {
        for (int r = 0; r < rows; ++r) {
          std::memcpy(kd + size_t(p + r) * D, src.k + (slot + r) * src.ld, sizeof(float) * D);
          std::memcpy(vd + size_t(p + r) * D, src.v + (slot + r) * src.ld, sizeof(float) * D);
        }
      }
    }
    view.heads[size_t(h)] = {kd, vd, D};
  }
  return view;
}

int PagedKvStorage::slot(int pos) const {
  const int B = pool_.block_size();
  FUTR_ASSERT(pos >= 0 && size_t(pos / B) < blocks_.table.size());
  return blocks_.table[size_t(pos / B)] * B + pos % B;
}

void PagedKvStorage::write(int layer, int pos, int n, const float* k, const float* v) {
  FUTR_ASSERT(pos >= 0 && n >= 0 && pos + n <= capacity_);
  const int B = pool_.block_size();
  const int64_t kv_dim = pool_.row_floats();  // k, v: [n, n_kv_heads * head_dim]
  // Each run of rows inside one block is consecutive slots: one write each.
  for (int i = 0; i < n;) {
    const int p = pos + i, run = std::min(n - i, B - p % B);
    pool_.slots().write(layer, slot(p), run, k + i * kv_dim, v + i * kv_dim);
    i += run;
  }
}

KvLayerView PagedKvStorage::read(int layer, int len) {
  FUTR_ASSERT(len >= 0 && len <= capacity_);
  return pool_.gather(blocks_.table, layer, len);
}

void PagedKvStorage::copy_rows(int src, int dst, int n) {
  FUTR_ASSERT(n >= 0 && src >= 0 && dst >= 0);
  for (int i = 0; i < n; ++i) pool_.slots().copy_rows(slot(src + i), slot(dst + i), 1);
}

}  // namespace futr::cpu
