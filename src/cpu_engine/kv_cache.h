// The KV cache of the CPU reference backend: per layer, the keys (after RoPE)
// and values of every position processed so far, preallocated for the whole
// context so that a sequence never reallocates.
//
// Two parts:
//   - KvStorage: how K and V rows are stored (this file: FP32; kv_quant.h adds
//     BF16, INT4 and INT4 with a Walsh-Hadamard rotation). The forward pass
//     writes rows and reads them back as FP32 "attention-space" matrices.
//   - KvCache: the storage plus the number of positions filled, with the
//     capacity check that turns "too many tokens" into a clear futr::Error.
//
// Attention space. Attention computes softmax(q k^T / sqrt(d)) v per head.
// A storage may hold rows transformed by an orthogonal matrix H (block
// Walsh-Hadamard, H^T H = I): k' = k H, v' = v H. Then
//     q k^T = (q H)(k H)^T          (so the query is mapped q -> q H)
//     sum_j p_j v_j = (sum_j p_j v'_j) H^T   (the output is mapped back)
// The hooks map_query() and unmap_output() do these two steps; for an
// untransformed storage they are the identity. The forward pass always calls
// them, so a rotated cache needs no change to it.
//
// Layout of Fp32KvStorage: k and v are each [n_layers, n_kv_heads, capacity,
// head_dim] FP32, so the rows [0, len) of one head are one contiguous
// [len, head_dim] matrix that attention multiplies directly (no copy).
//
// Tests: tests/cpu_engine/kv_cache_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"

namespace futr::cpu {

// FP32 view of rows [0, len) of one KV head in attention space:
//   key of position t, dimension d: k[t * ld + d]; same for v.
struct KvHeadView {
  const float* k = nullptr;  // [len, head_dim] with row stride ld
  const float* v = nullptr;  // [len, head_dim] with row stride ld
  int64_t ld = 0;            // row stride in floats (>= head_dim)
};

// All KV heads of one layer, rows [0, len).
struct KvLayerView {
  std::vector<KvHeadView> heads;  // [n_kv_heads]
  int len = 0;                    // positions visible
};

// Rows stored densely as [n_layers, n_kv_heads, capacity, head_dim] FP32
// arrays (the FP32 storage, and the attention-space rows of the quantized
// ones): the float index of (layer, head, pos), and the view of rows [0, len).
struct DenseKvShape {
  int n_layers = 0, n_kv_heads = 0, capacity = 0, head_dim = 0;
  int64_t offset(int layer, int head, int pos) const {
    return ((int64_t(layer) * n_kv_heads + head) * capacity + pos) * head_dim;
  }
};
KvLayerView dense_kv_view(const DenseKvShape& s, const float* k, const float* v, int layer, int len);
// copy_rows() of such arrays: rows [src, src + n) -> [dst, dst + n) of every (layer, head).
void dense_kv_copy(const DenseKvShape& s, float* k, float* v, int src, int dst, int n);

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual std::string name() const = 0;  // "fp32", later "bf16", "int4", "int4-rot"
  virtual int capacity() const = 0;      // positions it can hold per layer
  // Store positions [pos, pos + n) of `layer`. k, v: [n, n_kv_heads * head_dim]
  // row-major FP32 (k after RoPE). The caller guarantees pos + n <= capacity().
  virtual void write(int layer, int pos, int n, const float* k, const float* v) = 0;
  // Rows [0, len) of `layer` as FP32 in attention space (dequantized if the
  // storage is quantized). The view stays valid until the next write/read.
  virtual KvLayerView read(int layer, int len) = 0;
  // q: [n, n_heads * head_dim] with row stride ld; maps each head's query
  // into attention space (q -> q H). Identity by default.
  virtual void map_query(float* q, int64_t n, int64_t ld) const {}
  // o: [n, n_heads * head_dim] with row stride ld; maps each head's attention
  // output back (o -> o H^T). Identity by default.
  virtual void unmap_output(float* o, int64_t n, int64_t ld) const {}
  // Bytes held (for reports).
  virtual int64_t bytes() const = 0;
  // Copies positions [src, src + n) to [dst, dst + n) in every layer, every
  // form the storage keeps (the FP32 rows, the INT4 mirror's bytes and
  // scales): the copy-on-write of a paged cache block (cpu_engine/paged_kv.h).
  // The ranges must not overlap.
  virtual void copy_rows(int src, int dst, int n) = 0;
};

// Plain FP32 rows: exactly what the FP32 forward computed.
class Fp32KvStorage final : public KvStorage {
 public:
  Fp32KvStorage(const ModelConfig& config, int capacity);
  std::string name() const override { return "fp32"; }
  int capacity() const override { return capacity_; }
  void write(int layer, int pos, int n, const float* k, const float* v) override;
  KvLayerView read(int layer, int len) override;
  int64_t bytes() const override { return int64_t(k_.size() + v_.size()) * 4; }
  void copy_rows(int src, int dst, int n) override;

 private:
  int64_t offset(int layer, int head, int pos) const;  // float index of a row
  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  int capacity_ = 0;
  std::vector<float> k_;  // [n_layers, n_kv_heads, capacity, head_dim]
  std::vector<float> v_;  // [n_layers, n_kv_heads, capacity, head_dim]
};

// A storage and the number of positions filled (shared by all layers).
class KvCache {
 public:
  explicit KvCache(std::unique_ptr<KvStorage> storage);
  KvStorage& storage() { return *storage_; }
  const KvStorage& storage() const { return *storage_; }
  int capacity() const { return storage_->capacity(); }
  int length() const { return length_; }  // positions filled
  // Throws futr::Error when n more positions do not fit.
  void check_room(int n) const;
  // After all layers stored positions [length, length + n).
  void advance(int n);
  // Forget everything (a new sequence); the memory stays allocated.
  void clear() { length_ = 0; }
  // Keep only positions [0, len) (e.g. to re-run a prompt suffix).
  void truncate(int len);

 private:
  std::unique_ptr<KvStorage> storage_;
  int length_ = 0;
};

// The FP32 storage, sized for `capacity` positions (validated: 1..2^24 and
// the memory it needs must be below 64 GiB).
std::unique_ptr<KvStorage> make_fp32_kv_storage(const ModelConfig& config, int capacity);

}  // namespace futr::cpu
