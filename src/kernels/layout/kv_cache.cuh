// The KV-cache layouts: the BF16 primary cache and the INT4 mirror, per layer.
// This header is THE contract between the CPU quantizer (quant/kv_int4.h,
// cpu::QuantKvStorage), the append kernel (sm90_kv_append.cuh) and the decode
// attention kernel (sm90_decode_attention.cuh); docs/LAYOUTS.md draws it.
// Host code includes it too: device-only parts are under __CUDACC__.
//
// A cache holds `num_slots` token slots (a multiple of 16); a sequence owns a
// contiguous run of slots starting at a multiple of 16, so a 16-token step of
// the attention kernel never straddles two sequences.
//
//   BF16 primary  [num_slots][kv_heads][D] BF16 (K after RoPE, and V)
//   K nibbles     [num_slots / 8][kv_heads][32 lanes][D / 8 bytes]   fragment order
//   V nibbles     [num_slots][kv_heads][D / 2 bytes]                  channel order
//   K scales      [kv_heads][num_slots] FP32  (head-major: a head's scales of
//   V scales      [kv_heads][num_slots] FP32   16 consecutive slots are 64 B)
//
// Row quantization (quant/kv_int4.h): per slot and KV head, s = amax / 7,
// nibble n = clamp(rne(x / s), -7, 7) + 8, x ~= (n - 8) * s.
//
// K in fragment order (8-slot tiles). Lane (g, c) of a tile (g = lane / 4 =
// slot % 8, c = lane % 4) owns D/8 contiguous bytes; its byte 2s + e holds dims
//     d = 16s + 8e + 2c  (low nibble) and d + 1 (high nibble).
// Read as 32-bit words (word i = bytes 4i..4i+3, i.e. s = 2i, 2i+1), the
// dequantizer int4x8_to_half2 below gives four half2 registers:
//     r[0] = dims (32i + 2c,     32i + 16 + 2c)        (low nibbles of bytes 4i, 4i+2)
//     r[1] = dims (32i + 2c + 1, 32i + 16 + 2c + 1)    (high nibbles of bytes 4i, 4i+2)
//     r[2] = dims (32i + 8 + 2c,     32i + 24 + 2c)    (low nibbles of bytes 4i+1, 4i+3)
//     r[3] = dims (32i + 8 + 2c + 1, 32i + 24 + 2c + 1)
// Two consecutive tiles (slots t0..t0+7 and t0+8..t0+15) of one head are then
// the A operand (16 tokens x 16 dims, "row") of mma.m16n8k16 for S^T = K Q^T:
// for mma step 2i + h the A registers are {tile0 r[2h], tile1 r[2h],
// tile0 r[2h+1], tile1 r[2h+1]}, with the step's k columns (2c, 2c+1) <->
// dims r[2h] and (2c+8, 2c+9) <-> dims r[2h+1]; the query (B operand) uses the
// same k permutation (kv_query_dim below). The sum over k does not care.
//
// V in channel order: byte d/2 of a slot's row holds dims d (low nibble) and
// d + 1 (high nibble).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define FUTR_HD __host__ __device__
#else
#define FUTR_HD
#endif

namespace futr::layout {

inline constexpr int kKvTileSlots = 8;   // slots per K fragment tile
inline constexpr int kKvSlotAlign = 16;  // sequences start at, and caches hold, multiples of this

struct KvNibble {
  size_t byte;  // byte offset from the start of the layer's K (or V) nibbles
  int shift;    // 0: low nibble, 4: high nibble
};

// Where dim d of the key of (slot, head) lives (fragment order).
FUTR_HD inline KvNibble kv_key_nibble(int kv_heads, int head_dim, int slot, int head, int d) {
  const int tile = slot / kKvTileSlots, g = slot % kKvTileSlots;
  const int s = d / 16, r = d % 16, e = r / 8, c = (r % 8) / 2;
  const int lane = 4 * g + c;
  const size_t tile_bytes = size_t(kKvTileSlots) * size_t(head_dim) / 2;  // 32 lanes x D/8
  const size_t byte = (size_t(tile) * size_t(kv_heads) + size_t(head)) * tile_bytes +
                      size_t(lane) * size_t(head_dim / 8) + size_t(2 * s + e);
  return {byte, (d % 2) * 4};
}

// Where dim d of the value of (slot, head) lives (channel order).
FUTR_HD inline KvNibble kv_value_nibble(int kv_heads, int head_dim, int slot, int head, int d) {
  const size_t byte = (size_t(slot) * size_t(kv_heads) + size_t(head)) * size_t(head_dim / 2) + size_t(d / 2);
  return {byte, (d % 2) * 4};
}

// A paged cache's block tables (docs/LAYOUTS.md, "Paged KV cache"): position
// p of sequence s is slot tables[s * stride + p / B] * B + p % B, B = 1 <<
// shift, a multiple of kKvSlotAlign (a 16-slot step of the attention never
// straddles two blocks). Entries past a sequence's blocks are -1 (slots read
// there come out negative: TMA reads them as zeros, the decode kernels never
// read past the length rounded up to 16). tables null: the contiguous cache,
// slot = slot_base[s] + p.
struct KvBlockTable {
  const int* tables = nullptr;  // [sequences][stride] block ids (device)
  int stride = 0;               // entries per sequence
  int shift = 0;                // log2 of the block size
};

// The slot of position p of sequence s (slot_base: the contiguous cache's
// first slot of each sequence, read when there is no table).
FUTR_HD inline int kv_slot(const KvBlockTable& t, const int* slot_base, int s, int p) {
  if (t.tables)
    return (t.tables[size_t(s) * size_t(t.stride) + size_t(p >> t.shift)] << t.shift) |
           (p & ((1 << t.shift) - 1));
  return slot_base[s] + p;
}

// Index of the FP32 scale of (slot, head) in the K or V scale array.
FUTR_HD inline size_t kv_scale_index(int num_slots, int slot, int head) {
  return size_t(head) * size_t(num_slots) + size_t(slot);
}

// Bytes of K (or V) nibbles of one layer.
FUTR_HD inline size_t kv_nibble_bytes(int kv_heads, int head_dim, int num_slots) {
  return size_t(num_slots) * size_t(kv_heads) * size_t(head_dim) / 2;
}

// The KV cache of one layer (host and device code pass this by value). The
// BF16 pointers are always set (the primary); the INT4 ones for the mirror.
struct KvLayerPtrs {
  uint16_t* k = nullptr;  // [num_slots][kv_heads][D] BF16 bits (K after RoPE)
  uint16_t* v = nullptr;  // [num_slots][kv_heads][D] BF16 bits
  uint8_t* k4 = nullptr;  // [num_slots/8][kv_heads][32][D/8] nibbles, fragment order
  uint8_t* v4 = nullptr;  // [num_slots][kv_heads][D/2] nibbles, channel order
  float* ks = nullptr;    // [kv_heads][num_slots] FP32
  float* vs = nullptr;    // [kv_heads][num_slots] FP32
  int num_slots = 0;      // multiple of kKvSlotAlign
};

// Element index of (slot, head, d) in the BF16 primary cache of one layer.
FUTR_HD inline size_t kv_primary_index(int kv_heads, int head_dim, int slot, int head, int d) {
  return (size_t(slot) * size_t(kv_heads) + size_t(head)) * size_t(head_dim) + size_t(d);
}

// The query dim that meets k column `col` (0..15) of mma step `m` (0..D/16-1)
// in S^T = K Q^T over the INT4 mirror (see the header comment): step m = 2i + h,
// col = 2c + p (p = 0, 1) or 8 + 2c + p -> register r[2h] (first 8 columns) or
// r[2h + 1], half 0 (p = 0) or half 1 (p = 1).
FUTR_HD constexpr int kv_int4_query_dim(int m, int col) {
  const int i = m / 2, h = m % 2, hi8 = col / 8, c = (col % 8) / 2, p = col % 2;
  // r[2h + hi8] half p = dim 32i + 8h + 2c + hi8 + 16p
  return 32 * i + 8 * h + 2 * c + hi8 + 16 * p;
}

#if defined(__CUDACC__)

// half2 constants of the nibble dequantizer: FP16 1024 + n (n in the mantissa)
// minus 1032 is n - 8, exactly.
inline constexpr uint32_t kHalf2Magic1024 = 0x64006400u;  // {1024, 1024}
inline constexpr uint32_t kHalf2Neg1032 = 0xE408E408u;    // {-1032, -1032}

// One 32-bit word of nibbles to four half2 registers: r[j] = the nibbles at
// bits 4j..4j+3 (half 0) and 16+4j.. (half 1), each as n - 8. Exact.
// 3 shifts, 4 lop3, 4 add.f16x2 for 8 values.
__device__ __forceinline__ void int4x8_to_half2(uint32_t w, uint32_t (&r)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n"
        : "=r"(v)
        : "r"(w >> (4 * j)), "r"(0x000f000fu), "r"(kHalf2Magic1024));
    asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(r[j]) : "r"(v), "r"(kHalf2Neg1032));
  }
}

// The same four registers from two masks and one shift (9 instructions for 8
// values): r[0], r[2] as above (n - 8); r[1], r[3] (the high nibbles) come out
// as 16 * (n - 8): FP16 1024 + 16n minus 1152, exact. The kernels fold the
// factor 1/16 into what r[1], r[3] meet (the query's columns 8..15 for keys,
// output rows g + 8 for values).
inline constexpr uint32_t kHalf2Neg1152 = 0xE480E480u;  // {-1152, -1152}
__device__ __forceinline__ void int4x8_to_half2_hi16(uint32_t w, uint32_t (&r)[4]) {
  const uint32_t w8 = w >> 8;
  uint32_t v[4];
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(v[0]) : "r"(w), "r"(0x000f000fu), "r"(kHalf2Magic1024));
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(v[1]) : "r"(w), "r"(0x00f000f0u), "r"(kHalf2Magic1024));
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(v[2]) : "r"(w8), "r"(0x000f000fu), "r"(kHalf2Magic1024));
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(v[3]) : "r"(w8), "r"(0x00f000f0u), "r"(kHalf2Magic1024));
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t bias = j % 2 ? kHalf2Neg1152 : kHalf2Neg1032;
    asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(r[j]) : "r"(v[j]), "r"(bias));
  }
}

#endif  // __CUDACC__

}  // namespace futr::layout
