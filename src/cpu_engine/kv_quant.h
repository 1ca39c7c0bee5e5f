// Quantized KV storages of the CPU reference (the KvStorage seam of
// cpu_engine/kv_cache.h): what the GPU's decode attention reads.
//
//   bf16      the BF16 primary cache: rows rounded to BF16 on write; q rounded
//             to BF16 (the QKV epilogue stores q as BF16).
//   int4      the INT4 mirror (quant/kv_int4.h): rows bf16-rounded, then per
//             token and KV head s = amax/7, q = rne(x/s) in [-7, 7]; attention
//             reads q * s.
//   int4-rot  as int4, on rows rotated by the block Walsh-Hadamard transform
//             (quant/hadamard.h, block b): k' = bf16(k) H, v' = bf16(v) H are
//             quantized; map_query: q -> bf16(q) H; unmap_output: o -> o H
//             (H is symmetric and orthogonal, so H^T = H and q'.k' = q.k).
//
// The INT4 modes keep the mirror in exactly the documented byte layout (K in
// fragment order, V in channel order, FP32 scales) and an FP32 copy of what it
// dequantizes to (decoded from the mirror bytes at write time), which is what
// attention reads. bytes() counts the BF16 primary plus the mirror (the GPU
// keeps both), not the FP32 copy.
//
// Perplexity with an INT4 mode measures the decode path: every query, also in
// a prompt chunk, attends to INT4 keys and values (the GPU's prefill attention
// reads the BF16 primary; docs/QUANTIZATION.md).
//
// Tests: tests/cpu_engine/kv_quant_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "cpu_engine/kv_cache.h"
#include "model/config.h"

namespace futr::cpu {

class QuantKvStorage final : public KvStorage {
 public:
  // rot_block: Hadamard block size (int4-rot only; a power of two dividing head_dim).
  QuantKvStorage(const ModelConfig& config, int capacity, KvFormat mode, int rot_block);
  std::string name() const override;
  int capacity() const override { return capacity_; }
  void write(int layer, int pos, int n, const float* k, const float* v) override;
  KvLayerView read(int layer, int len) override;
  void map_query(float* q, int64_t n, int64_t ld) const override;
  void unmap_output(float* o, int64_t n, int64_t ld) const override;
  int64_t bytes() const override;
  void copy_rows(int src, int dst, int n) override;

  // The mirror of one layer, in the layout of kernels/layout/kv_cache.cuh (INT4 modes).
  const std::vector<uint8_t>& key_nibbles(int layer) const { return mirror_[size_t(layer)].k; }
  const std::vector<uint8_t>& value_nibbles(int layer) const { return mirror_[size_t(layer)].v; }
  const std::vector<float>& key_scales(int layer) const { return mirror_[size_t(layer)].ks; }
  const std::vector<float>& value_scales(int layer) const { return mirror_[size_t(layer)].vs; }
  int slots() const { return slots_; }  // capacity rounded up to a multiple of 16

 private:
  struct Mirror {
    std::vector<uint8_t> k;  // [slots/8][kv_heads][32][D/8] fragment order
    std::vector<uint8_t> v;  // [slots][kv_heads][D/2] channel order
    std::vector<float> ks;   // [kv_heads][slots]
    std::vector<float> vs;   // [kv_heads][slots]
  };
  int64_t offset(int layer, int head, int pos) const;  // float index in k_/v_
  // Quantizes a row into the mirror and writes its dequantized values to dst.
  void store_int4(Mirror& m, bool key, int slot, int head, const float* row, float* dst);

  KvFormat mode_;
  int rot_block_;
  int n_layers_, n_kv_heads_, n_heads_, head_dim_, capacity_, slots_;
  std::vector<float> k_, v_;    // [n_layers, n_kv_heads, capacity, D] attention-space rows
  std::vector<Mirror> mirror_;  // [n_layers] (INT4 modes)
};

// The storage for `mode` (fp32: make_fp32_kv_storage).
std::unique_ptr<KvStorage> make_kv_storage(const ModelConfig& config, int capacity, KvFormat mode,
                                           int rot_block);

}  // namespace futr::cpu
