// BF16 / INT4 / rotated INT4 KV storage (see kv_quant.h).
#include "cpu_engine/kv_quant.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/numeric.h"
#include "quant/hadamard.h"
#include "quant/kv_int4.h"

namespace futr::cpu {

QuantKvStorage::QuantKvStorage(const ModelConfig& c, int capacity, KvFormat mode, int rot_block)
    : mode_(mode),
      rot_block_(rot_block),
      n_layers_(c.n_layers),
      n_kv_heads_(c.n_kv_heads),
      n_heads_(c.n_heads),
      head_dim_(c.head_dim),
      capacity_(capacity),
      slots_((capacity + layout::kKvSlotAlign - 1) / layout::kKvSlotAlign * layout::kKvSlotAlign) {
  FUTR_CHECK(mode != KvFormat::kFp32 && mode != KvFormat::kAuto,
             "QuantKvStorage: {} is not a quantized KV format", to_string(mode));
  FUTR_CHECK(capacity >= 1 && capacity <= (1 << 24),
             "KV cache: context length {} is out of range (1..16777216)", capacity);
  const double bytes = 2.0 * 4.0 * n_layers_ * n_kv_heads_ * double(capacity) * head_dim_;
  FUTR_CHECK(bytes < 64.0 * (1ull << 30), "KV cache: context {} needs {:.1f} GiB; use a smaller --ctx",
             capacity, bytes / double(1ull << 30));
  if (mode == KvFormat::kInt4 || mode == KvFormat::kInt4Rot)
    FUTR_CHECK(head_dim_ % 16 == 0, "INT4 KV cache: head_dim {} must be a multiple of 16", head_dim_);
  if (mode == KvFormat::kInt4Rot)
    FUTR_CHECK(quant::hadamard_block_ok(head_dim_, rot_block),
               "--kv-block {}: the Hadamard block must be a power of two dividing head_dim {}", rot_block,
               head_dim_);
  const size_t n = size_t(n_layers_) * n_kv_heads_ * size_t(capacity) * head_dim_;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
  if (mode == KvFormat::kInt4 || mode == KvFormat::kInt4Rot) {
    mirror_.resize(size_t(n_layers_));
    for (Mirror& m : mirror_) {
      const size_t nb = layout::kv_nibble_bytes(n_kv_heads_, head_dim_, slots_);
      m.k.assign(nb, 0);
      m.v.assign(nb, 0);
      m.ks.assign(size_t(slots_) * n_kv_heads_, 0.0f);
      m.vs.assign(size_t(slots_) * n_kv_heads_, 0.0f);
    }
  }
}

std::string QuantKvStorage::name() const {
  if (mode_ == KvFormat::kInt4Rot) return fmt::format("int4-rot (Hadamard block {})", rot_block_);
  return to_string(mode_);
}

int64_t QuantKvStorage::offset(int layer, int head, int pos) const {
  return DenseKvShape{n_layers_, n_kv_heads_, capacity_, head_dim_}.offset(layer, head, pos);
}

int64_t QuantKvStorage::bytes() const {
  const int64_t primary = int64_t(2) * 2 * n_layers_ * n_kv_heads_ * int64_t(capacity_) * head_dim_;
  if (mirror_.empty()) return primary;
  int64_t mirror = 0;
  for (const Mirror& m : mirror_)
    mirror += int64_t(m.k.size() + m.v.size()) + 4 * int64_t(m.ks.size() + m.vs.size());
  return primary + mirror;
}

void QuantKvStorage::store_int4(Mirror& m, bool key, int slot, int head, const float* row, float* dst) {
  const quant::KvInt4Half half{
      key ? m.k.data() : m.v.data(), key ? m.ks.data() : m.vs.data(), key, slots_, n_kv_heads_, head_dim_};
  quant::kv_int4_store_row(half, slot, head, row);
  // What attention reads: decoded back from the mirror bytes.
  for (int d = 0; d < head_dim_; ++d) dst[d] = quant::kv_int4_load(half, slot, head, d);
}

void QuantKvStorage::write(int layer, int pos, int n, const float* k, const float* v) {
  FUTR_ASSERT(layer >= 0 && layer < n_layers_ && pos >= 0 && n >= 0 && pos + n <= capacity_);
  const int D = head_dim_, kv_dim = n_kv_heads_ * D;
  // Checked here: an exception must not leave the OpenMP region below.
  for (int64_t i = 0; i < int64_t(n) * kv_dim; ++i)
    FUTR_CHECK(std::isfinite(k[i]) && std::isfinite(v[i]),
               "KV cache: a key or value of layer {} is not finite", layer);
#pragma omp parallel for schedule(static) if (n >= 16)
  for (int i = 0; i < n; ++i) {
    float kr[1024], vr[1024];
    for (int h = 0; h < n_kv_heads_; ++h) {
      const size_t src = size_t(i) * kv_dim + size_t(h) * D;
      for (int d = 0; d < D; ++d) {
        kr[d] = round_bf16(k[src + d]);  // the BF16 primary's row
        vr[d] = round_bf16(v[src + d]);
      }
      float* kd = &k_[size_t(offset(layer, h, pos + i))];
      float* vd = &v_[size_t(offset(layer, h, pos + i))];
      if (mode_ == KvFormat::kBf16) {
        std::memcpy(kd, kr, sizeof(float) * size_t(D));
        std::memcpy(vd, vr, sizeof(float) * size_t(D));
        continue;
      }
      if (mode_ == KvFormat::kInt4Rot) {
        quant::hadamard_rotate(kr, D, rot_block_);
        quant::hadamard_rotate(vr, D, rot_block_);
      }
      Mirror& m = mirror_[size_t(layer)];
      store_int4(m, true, pos + i, h, kr, kd);
      store_int4(m, false, pos + i, h, vr, vd);
    }
  }
}

void QuantKvStorage::copy_rows(int src, int dst, int n) {
  dense_kv_copy({n_layers_, n_kv_heads_, capacity_, head_dim_}, k_.data(), v_.data(), src, dst, n);
  const int D = head_dim_;
  for (Mirror& m : mirror_)
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < n_kv_heads_; ++h) {
        // K: a byte holds dims d and d + 1 (even d) of one slot; V: a slot's head row is D/2 bytes.
        for (int d = 0; d < D; d += 2)
          m.k[layout::kv_key_nibble(n_kv_heads_, D, dst + i, h, d).byte] =
              m.k[layout::kv_key_nibble(n_kv_heads_, D, src + i, h, d).byte];
        std::memcpy(&m.v[layout::kv_value_nibble(n_kv_heads_, D, dst + i, h, 0).byte],
                    &m.v[layout::kv_value_nibble(n_kv_heads_, D, src + i, h, 0).byte], size_t(D / 2));
        m.ks[layout::kv_scale_index(slots_, dst + i, h)] = m.ks[layout::kv_scale_index(slots_, src + i, h)];
        m.vs[layout::kv_scale_index(slots_, dst + i, h)] = m.vs[layout::kv_scale_index(slots_, src + i, h)];
      }
}

KvLayerView QuantKvStorage::read(int layer, int len) {
  return dense_kv_view({n_layers_, n_kv_heads_, capacity_, head_dim_}, k_.data(), v_.data(), layer, len);
}

void QuantKvStorage::map_query(float* q, int64_t n, int64_t ld) const {
  const int64_t width = int64_t(n_heads_) * head_dim_;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < width; ++j) q[i * ld + j] = round_bf16(q[i * ld + j]);
  if (mode_ == KvFormat::kInt4Rot) quant::hadamard_rotate_heads(q, n, ld, n_heads_, head_dim_, rot_block_);
}

void QuantKvStorage::unmap_output(float* o, int64_t n, int64_t ld) const {
  if (mode_ == KvFormat::kInt4Rot) quant::hadamard_rotate_heads(o, n, ld, n_heads_, head_dim_, rot_block_);
}

std::unique_ptr<KvStorage> make_kv_storage(const ModelConfig& config, int capacity, KvFormat mode,
                                           int rot_block) {
  if (mode == KvFormat::kFp32) return make_fp32_kv_storage(config, capacity);
  return std::make_unique<QuantKvStorage>(config, capacity, mode, rot_block);
}

}  // namespace futr::cpu
