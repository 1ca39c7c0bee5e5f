// The paged KV cache of the CPU engines (docs/LAYOUTS.md, "Paged KV cache"):
// one slot storage for every sequence, cut into blocks of B token slots, and
// per sequence a KvStorage that reads and writes through its block table, so
// the forward pass (cpu_engine/forward.h) runs on it unchanged.
//
//   PagedKvPool     a KvStorage of num_blocks x B slots (any format of
//                   kv_cache.h / kv_quant.h: FP32, BF16, INT4 mirror, INT4
//                   with rotation), block b = slots [b * B, (b + 1) * B), plus
//                   the one gather buffer the sequences' reads share.
//   PagedKvStorage  a sequence's view: position p lives in slot
//                   table[p / B] * B + p % B (runtime::SequenceBlocks, kept
//                   by the engine through runtime::BlockPool).
//
// Writes go to the slots directly (a row's stored form depends only on the
// row: rounding, rotation and INT4 quantization are per slot and KV head, so
// a block's content does not depend on where it sits). A read gathers the
// sequence's rows [0, len) of one layer into the shared buffer, each head as
// one contiguous [len, head_dim] matrix (one copy per block and head), which
// is exactly the view the contiguous cache gives: attention runs on the same
// floats in the same order, so the outputs equal the contiguous cache's bit
// for bit for any B (tests/cpu_engine/paged_kv_test.cpp). The gather costs a
// copy of the rows read per layer and step; the GPU's attention reads through
// the block table instead.
//
// The view returned by read() is valid until the next read of any sequence of
// the pool (one forward pass runs at a time, layer by layer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu_engine/kv_cache.h"
#include "model/config.h"
#include "runtime/kv_blocks.h"

namespace futr::cpu {

class PagedKvPool {
 public:
  // slots: a storage whose capacity is a multiple of block_size (num_blocks x B).
  PagedKvPool(const ModelConfig& config, std::unique_ptr<KvStorage> slots, int block_size);
  KvStorage& slots() { return *slots_; }
  const KvStorage& slots() const { return *slots_; }
  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return slots_->capacity() / block_size_; }
  int64_t row_floats() const { return int64_t(n_kv_heads_) * head_dim_; }  // one position's K (or V)
  // Copy-on-write: rows [0, copy.rows) of block src into block dst, every layer and form.
  void copy_block(const runtime::BlockCopy& copy);
  // Rows [0, len) of `layer` through `table`, gathered (see the file comment).
  KvLayerView gather(std::span<const runtime::BlockId> table, int layer, int len);

 private:
  int n_kv_heads_, head_dim_, block_size_;
  std::unique_ptr<KvStorage> slots_;
  std::vector<float> k_, v_;  // [n_kv_heads, len, head_dim] the last gather
};

class PagedKvStorage final : public KvStorage {
 public:
  // capacity: the positions a sequence may hold (the engine's ctx).
  PagedKvStorage(PagedKvPool& pool, int capacity) : pool_(pool), capacity_(capacity) {}
  std::string name() const override { return pool_.slots().name(); }
  int capacity() const override { return capacity_; }
  // The blocks of positions [pos, pos + n) must be in the table (BlockPool::grow).
  void write(int layer, int pos, int n, const float* k, const float* v) override;
  KvLayerView read(int layer, int len) override;
  void map_query(float* q, int64_t n, int64_t ld) const override { pool_.slots().map_query(q, n, ld); }
  void unmap_output(float* o, int64_t n, int64_t ld) const override { pool_.slots().unmap_output(o, n, ld); }
  int64_t bytes() const override { return 0; }  // the pool's bytes, counted once by the engine
  void copy_rows(int src, int dst, int n) override;
  // The sequence's blocks (the engine grows, commits and releases them).
  runtime::SequenceBlocks& blocks() { return blocks_; }
  const runtime::SequenceBlocks& blocks() const { return blocks_; }

 private:
  int slot(int pos) const;
  PagedKvPool& pool_;
  int capacity_;
  runtime::SequenceBlocks blocks_;
};

}  // namespace futr::cpu
