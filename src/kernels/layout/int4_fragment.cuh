// The decode-weight layouts: INT4 (and E4M3) weights stored in the order of the
// mma.sync.m16n8k16 operand fragments, so one 16-byte load per lane is its
// operands. This header is THE contract between the packer
// (src/quant/int4_pack.cpp, host C++) and the kernels
// (src/kernels/sm90_w4a16_*.cuh); docs/LAYOUTS.md draws it. Host code
// includes it too: device-only parts are under __CUDACC__.
//
// Problem: y[M,N] = x[M,K] * W[N,K]^T, W quantized symmetric INT4 per output
// channel n and group of G inputs (G = 128 or 64):
//     W[n,k] = q[n,k] * s[n, k/G],  q in [-8, 7],  s FP16.
//
// Operand roles ("swap AB"). The weights are the MMA's A operand (16 output
// channels x 16 inputs) and the activations its B operand (16 inputs x 8 rows
// of x): y^T = W x^T. With M <= 8 query rows one MMA serves all of them, and
// every operand register comes straight out of a load or of the dequantizer
// (with x as A, each step needed register moves to interleave two rows of x,
// and half of each MMA was wasted for M <= 8: docs/PERF.md).
//
// Tiling. W is cut into m16 tiles (16 output channels) and k64 chunks. Per
// (tile, chunk) a warp holds 16 x 64 weights, 512 bytes of INT4: one 16-byte
// load per lane. Tiles are grouped by 8 (the tiles of the 8 warps of a CTA; the
// last group of a matrix may have fewer): a group is a contiguous run, chunk
// major: [chunk][tile of the group][512 bytes], so at each step a CTA reads one
// contiguous 4 KB run instead of 8 runs 16*K/2 bytes apart (with tile-major
// order thousands of warps streamed separate regions and DRAM delivered
// ~2 TB/s: docs/PERF.md).
//
// The k permutation. An mma step covers 16 k positions; the MMA sums over them,
// so any bijection between mma k positions and logical k works if A and B use
// the same one. We choose the one that makes every lane's data contiguous in
// logical k. Lane (g, c) (g = lane/4, c = lane%4) holds, for mma step i = 0..3 of
// the chunk and k element e = 0..3 (mma k columns 2c, 2c+1, 2c+8, 2c+9), the
// logical chunk offset
//     k(c, i, e) = 16*c + 4*i + e                                   (chunk_k)
// for output channels g ("lo") and g + 8 ("hi") of the tile. So a lane's 16
// bytes are two weight rows' 16 consecutive inputs [16c, 16c+16), and its B
// operands (x) are 16 consecutive activations of row g of x: one 32-byte run.
// A chunk is half a group of 128 or one group of 64; a K tail of 64 is a chunk.
//
// INT4 bytes of one lane (16 bytes = 4 little-endian words): word i = step i.
// Its 8 nibbles are the A fragment a[0..3] of the step as four bf16x2 pairs;
// pair j sits in nibble j (bits 4j..4j+3: the pair's first value) and nibble
// 4 + j (bits 16+4j..: its second value), each as n = q + 8 in 0..15:
//     pair j   register   values (channel, k element)
//     0        a[0]       (lo, e0), (lo, e1)
//     1        a[1]       (hi, e0), (hi, e1)
//     2        a[2]       (lo, e2), (lo, e3)
//     3        a[3]       (hi, e2), (hi, e3)
// Dequantization of pair j (int4x8_to_bf16):
//     v = ((w >> 4j) & 0x000f000f) | 0x43004300   (lop3: bf16 128 + n, exact)
//     a = v * 1 - 136                              (fma.bf16x2: n - 8, exact)
// (BF16 has 7 mantissa bits, so a nibble fits only at bits 0..6 of a half: four
// shifted copies of the word are needed, 11 instructions per 8 weights.)
//
// Group scales (FP16, per tile): for each group gi, 16 values ordered
// [g][lo, hi], so lane (g, c) reads s[lo], s[hi] as one 4-byte word at 4g.
// Per tile that is 16*K/G scales; group gi starts at element gi * 16.
//
// E4M3 (the W8A16 comparison path) uses the same tiles, chunks and permutation
// with one byte per weight: per (tile, chunk) 1024 bytes = [q][lane][16 bytes],
// q = 0, 1; lane (g, c) holds steps 2q, 2q+1 in its 16 bytes of part q, each step
// as two words: word 2i' = bytes (lo e0, lo e1, hi e0, hi e1) -> a[0], a[1],
// word 2i'+1 = (lo e2, lo e3, hi e2, hi e3) -> a[2], a[3]. Scales: FP32 per channel.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define FUTR_HD __host__ __device__
#include "kernels/ptx/alu.cuh"
#else
#define FUTR_HD
#endif

namespace futr::layout {

inline constexpr int kTileN = 16;             // output channels per tile (mma M)
inline constexpr int kChunkK = 64;            // inputs per chunk (the K granule)
inline constexpr int kBlockK = 128;           // inputs per block (two chunks: one G=128 group)
inline constexpr int kStepsPerChunk = 4;      // mma k16 steps per chunk
inline constexpr int kInt4ChunkBytes = 512;   // 16 x 64 nibbles: 16 bytes per lane
inline constexpr int kE4M3ChunkBytes = 1024;  // 16 x 64 bytes: 32 bytes per lane
inline constexpr int kE4M3PartBytes = 512;    // one 16-byte-per-lane part of an E4M3 chunk
inline constexpr int kTileGroup = 8;          // tiles interleaved chunk by chunk (one CTA's)

// Byte offset of chunk `chunk` of tile `tile` in a packed matrix of `ntiles`
// tiles, K inputs and `chunk_bytes` bytes per (tile, chunk) (512 INT4, 1024 E4M3),
// and the stride from one chunk of a tile to its next.
FUTR_HD inline size_t tile_chunk_offset(int ntiles, int K, int chunk_bytes, int tile, int chunk) {
  const int group = tile / kTileGroup, r = tile % kTileGroup;
  const int gt = (ntiles - group * kTileGroup) < kTileGroup ? ntiles - group * kTileGroup : kTileGroup;
  const size_t tile_bytes = size_t(K / kChunkK) * size_t(chunk_bytes);
  return size_t(group) * kTileGroup * tile_bytes + (size_t(chunk) * gt + r) * size_t(chunk_bytes);
}
FUTR_HD inline size_t tile_chunk_stride(int ntiles, int chunk_bytes, int tile) {
  const int group = tile / kTileGroup;
  const int gt = (ntiles - group * kTileGroup) < kTileGroup ? ntiles - group * kTileGroup : kTileGroup;
  return size_t(gt) * size_t(chunk_bytes);
}

// Logical offset inside a 64-chunk of k element e of mma step i held by lanes
// with quad index c (see the header comment).
FUTR_HD constexpr int chunk_k(int c, int i, int e) { return 16 * c + 4 * i + e; }

// Nibble of an INT4 word holding (channel hi?, k element e): pair j = hi + 2*(e/2),
// first value of the pair (e even) in nibble j, second in nibble 4 + j.
FUTR_HD constexpr int int4_nibble(int hi, int e) { return (hi + 2 * (e / 2)) + 4 * (e % 2); }

struct Int4Pos {
  size_t byte;  // byte offset in the packed weight array
  int shift;    // 0 (low nibble) or 4 (high nibble)
};

// Where logical weight (row, col) of an [N, K] INT4 matrix lives. N % 16 == 0, K % 64 == 0.
FUTR_HD inline Int4Pos int4_position(int N, int K, int row, int col) {
  const int tile = row / kTileN, r = row % kTileN;
  const int g = r % 8, hi = r / 8;
  const int ch = col / kChunkK, o = col % kChunkK;
  const int c = o / 16, i = (o % 16) / 4, e = o % 4;
  const int lane = 4 * g + c;
  const int p = int4_nibble(hi, e);
  const size_t byte = tile_chunk_offset(N / kTileN, K, kInt4ChunkBytes, tile, ch) + size_t(lane) * 16 +
                      size_t(i) * 4 + size_t(p / 2);
  return {byte, (p % 2) * 4};
}

// Index (in FP16 elements) of the scale of output channel `row`, group `gi`.
FUTR_HD inline size_t int4_scale_index(int K, int group, int row, int gi) {
  const int tile = row / kTileN, r = row % kTileN;
  return size_t(tile) * (size_t(K) / group) * kTileN + size_t(gi) * kTileN + size_t(r % 8) * 2 +
         size_t(r / 8);
}

// Byte offset of logical E4M3 weight (row, col) of an [N, K] matrix. N % 16 == 0, K % 64 == 0.
FUTR_HD inline size_t e4m3_position(int N, int K, int row, int col) {
  const int tile = row / kTileN, r = row % kTileN;
  const int g = r % 8, hi = r / 8;
  const int ch = col / kChunkK, o = col % kChunkK;
  const int c = o / 16, i = (o % 16) / 4, e = o % 4;
  const int lane = 4 * g + c;
  const int q = i / 2, word = 2 * (i % 2) + e / 2, byte = 2 * hi + e % 2;
  return tile_chunk_offset(N / kTileN, K, kE4M3ChunkBytes, tile, ch) + size_t(q) * kE4M3PartBytes +
         size_t(lane) * 16 + size_t(word) * 4 + size_t(byte);
}

#if defined(__CUDACC__)

// bf16x2 constants of the dequantizers.
inline constexpr uint32_t kBf16x2Magic128 = 0x43004300u;  // {128, 128}
inline constexpr uint32_t kBf16x2One = 0x3F803F80u;       // {1, 1}
inline constexpr uint32_t kBf16x2Neg136 = 0xC308C308u;    // {-136, -136}
inline constexpr uint32_t kBf16x2Exp2_120 = 0x7B807B80u;  // {2^120, 2^120}

// One INT4 word (8 weights = one mma step of a lane) to the A fragment a[0..3].
// 4 x (shift, lop3, fma) minus one shift = 11 instructions, all exact.
__device__ __forceinline__ void int4x8_to_bf16(uint32_t w, uint32_t (&a)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t v = device::ptx::lop3<device::ptx::kLutAndOr>(w >> (4 * j), 0x000f000fu, kBf16x2Magic128);
    a[j] = device::ptx::fma_bf16x2(v, kBf16x2One, kBf16x2Neg136);
  }
}

// The same word as BIASED values: a[j] = bf16(128 + n) = bf16(q + 136), 4 lop3
// + 3 shifts = 7 instructions (no fma). A kernel using it subtracts
// 136 * sum_k x[k] per group and row after the MMAs (the sum comes from one
// extra MMA with an all-ones A operand, shared by every weight tile), which is
// exact in the MMA products and costs ~1e-6 relative in the FP32 sums.
__device__ __forceinline__ void int4x8_to_bf16_biased(uint32_t w, uint32_t (&a)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
    a[j] = device::ptx::lop3<device::ptx::kLutAndOr>(w >> (4 * j), 0x000f000fu, kBf16x2Magic128);
}
inline constexpr float kInt4Bias = 136.f;  // 128 (magic) + 8 (the zero point)

// One E4M3 word (4 weights) to two bf16x2 registers: bytes {b0, b1} -> r[0],
// {b2, b3} -> r[1]. prmt sign-extends bytes into 16-bit lanes; (x << 4) & 0x87f0
// moves the sign to bit 15 and exponent+mantissa to bits 10..4 (a BF16 with the
// E4M3 exponent field, subnormals included); the multiply by 2^120 re-biases
// 7 -> 127. Exact.
__device__ __forceinline__ void e4m3x4_to_bf16(uint32_t w, uint32_t (&r)[2]) {
  const uint32_t lo = device::ptx::prmt(w, 0u, 0x9180u);  // bytes {w0, sign(w0), w1, sign(w1)}
  const uint32_t hi = device::ptx::prmt(w, 0u, 0xB3A2u);  // bytes {w2, sign(w2), w3, sign(w3)}
  r[0] = device::ptx::mul_bf16x2((lo << 4) & 0x87f087f0u, kBf16x2Exp2_120);
  r[1] = device::ptx::mul_bf16x2((hi << 4) & 0x87f087f0u, kBf16x2Exp2_120);
}

#endif  // __CUDACC__

}  // namespace futr::layout
