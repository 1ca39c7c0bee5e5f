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
// Layout of one layer, slot-major like the BF16 cache [num_slots][kv_heads][D]
// (num_slots a multiple of 8; a request's slots start at a multiple of 8):
//
//   K nibbles  [num_slots / 8][kv_heads][32 lanes][D / 8 bytes]   fragment order
//   V nibbles  [num_slots][kv_heads][D / 2 bytes]                 channel order
//   K scales   [num_slots][kv_heads] FP32
//   V scales   [num_slots][kv_heads] FP32
//
// K in fragment order: a tile of 8 slots of one head is the B operand of
// mma.m16n8k16 for S = Q K^T over D/16 k-steps (B[k = dim, n = token]). Lane
// (g, c) (g = lane / 4 = token t0 + g, c = lane % 4) needs per k-step s the
// dims 16s + 2c + {0, 1} (register b0b1) and 16s + 8 + 2c + {0, 1} (b2b3):
// byte 2s + e of the lane holds dims d = 16s + 8e + 2c + {0 (low nibble), 1
// (high nibble)}. So one 8-byte (D = 64) or 16-byte (D = 128) load per lane
// gives all its B fragments of the tile; a 256-entry shared-memory table maps
// a byte to the half2 (lo - 8, hi - 8) = one B register, exactly. The per-token
// scale multiplies score column t after the MMA (FP32).
// V in channel order: byte d/2 of a row holds dims d (low nibble) and d + 1
// (high nibble); the kernel transposes V tiles through shared memory.
//
// Tests: tests/quant/kv_int4_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace futr::quant {

inline constexpr int kKvTileSlots = 8;  // slots per K fragment tile (mma N)

// Quantizes x[0..d) into q[0..d) (values in [-7, 7]); returns the FP32 scale.
float kv_int4_quantize_row(const float* x, int d, int8_t* q);

struct NibblePos {
  size_t byte;  // byte offset from the start of the layer's K (or V) nibbles
  int shift;    // 0: low nibble, 4: high nibble
};

// Where dim `d` of the key of `slot`, KV head `head` lives (fragment order).
NibblePos kv_key_position(int kv_heads, int head_dim, int slot, int head, int d);
// Where dim `d` of the value of `slot`, `head` lives (channel order).
NibblePos kv_value_position(int kv_heads, int head_dim, int slot, int head, int d);
// Index of the FP32 scale of (slot, head) in the K or V scale array.
inline size_t kv_scale_index(int kv_heads, int slot, int head) {
  return size_t(slot) * size_t(kv_heads) + size_t(head);
}
// Bytes of K (or V) nibbles of one layer with num_slots slots.
inline size_t kv_nibble_bytes(int kv_heads, int head_dim, int num_slots) {
  return size_t(num_slots) * size_t(kv_heads) * size_t(head_dim) / 2;
}

}  // namespace futr::quant
