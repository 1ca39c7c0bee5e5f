// The INT4 KV-cache mirror: row quantization and the byte layout the decode
// attention kernel reads (docs/LAYOUTS.md "INT4 KV-cache mirror" draws it).
//
// Quantization, per token (cache slot) and KV head, separately for K and V:
//     s = amax / 7                    FP32, amax = max_d |x_d| of the row
//     q_d = clamp(rne(x_d / s), -7, 7)   (s == 0: q = 0)
//     x_d ~= q_d * s,   stored nibble n = q + 8 (in 1..15)
// x is the row as the BF16 primary cache holds it (k after RoPE), rotated by
// the block Walsh-Hadamard transform first in the rotated variant
// (quant/hadamard.h).
//
// The byte layout (K nibbles in fragment order, V in channel order, FP32
// scales head-major) is the host+device contract src/kernels/layout/kv_cache.cuh;
// host code uses its position functions (layout::kv_key_nibble, ...) directly.
//
// Tests: tests/quant/kv_int4_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/layout/kv_cache.cuh"

namespace futr::quant {

// Quantizes x[0..d) into q[0..d) (values in [-7, 7]); returns the FP32 scale.
float kv_int4_quantize_row(const float* x, int d, int8_t* q);

// One layer's mirror, K or V half (kernels/layout/kv_cache.cuh).
struct KvInt4Half {
  uint8_t* nibbles = nullptr;  // K: fragment order; V: channel order
  float* scales = nullptr;     // [kv_heads][num_slots]
  bool key = true;
  int num_slots = 0, kv_heads = 0, head_dim = 0;
};

// Quantizes the row x[0..head_dim) (already rotated for int4-rot) and stores
// its nibbles and scale at (slot, head); returns the scale. The one writer of
// mirror rows on the host (the CPU KV storage, the append kernel's reference).
float kv_int4_store_row(const KvInt4Half& m, int slot, int head, const float* x);

// The value (n - 8) * s that dim d of (slot, head) decodes to.
float kv_int4_load(const KvInt4Half& m, int slot, int head, int d);

}  // namespace futr::quant
