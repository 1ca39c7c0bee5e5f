// The decode-weight layouts: INT4 (and E4M3) weights stored in the order of the
// mma.sync.m16n8k16 B fragments, so one 16-byte load per lane is its operands.
// This header is THE contract between the packer (src/quant/int4_pack.cpp, host
// C++) and the kernels (src/device/kernels/sm90_w4a16_*.cuh); docs/LAYOUTS.md
// draws it. Host code includes it too: device-only parts are under __CUDACC__.
//
// Problem: y[M,N] = x[M,K] * W[N,K]^T, W quantized symmetric INT4 per output
// channel n and group of G inputs (G = 128 or 64):
//     W[n,k] = q[n,k] * s[n, k/G],  q in [-8, 7],  s FP16.
//
// Tiling. W is cut into n8 tiles (8 output channels, the mma's N) and k128
// blocks. Per (tile, block) a warp holds 8 x 128 weights, 512 bytes of INT4: one
// 16-byte load per lane. Tiles are stored one after the other, each tile's
// blocks in k order, so a tile is a contiguous run of 8*K/2 bytes.
//
// The k permutation. An mma step covers 16 k positions; the MMA sums over them,
// so any bijection between mma k positions and logical k works if A and B use
// the same one. We choose the one that makes every lane's data contiguous in
// logical k. Lane (g, c) (g = lane/4, c = lane%4) holds, for mma step s = 0..7 of
// the block and fragment element e = 0..3 (b0, b1, b2, b3 = mma k rows 2c, 2c+1,
// 2c+8, 2c+9), the logical block offset
//     k(c, s, e) = 64*(s/4) + 16*c + 4*(s%4) + e                  (block_k)
// so lane (g, c) holds row g's 16 consecutive inputs [16c, 16c+16) of each
// 64-wide half h = s/4. Consequences:
//   - a lane's B operands are 2 x 16 contiguous nibbles of one weight row;
//   - a lane's A operands are 2 x 16 contiguous activations (two 32-byte runs);
//   - steps 0..3 read only the first 64 inputs and steps 4..7 only the second,
//     so a group of 64 is whole mma steps: per-group FP32 scaling after
//     accumulation works for G = 64 and G = 128 with the same weight bytes;
//   - a K tail of 64 (K = 576) is a half block: steps 0..3 only.
//
// INT4 bytes of one lane (16 bytes = 4 little-endian words w0..w3): word i holds
// steps 2i and 2i+1, i.e. half h = i/2, inputs 16c + 8*(i%2) + t, t = 0..7. Value
// t sits in nibble p(t) = (t >> 1) + 4*(t & 1) of the word (bits 4p..4p+3), as
// n = q + 8 in 0..15:
//     nibble  7    6    5    4  |  3    2    1    0
//     t       7    5    3    1  |  6    4    2    0
// so the nibble pairs at the same offset in the two 16-bit halves are (t0,t1),
// (t2,t3), (t4,t5), (t6,t7): exactly the bf16x2 operand registers b0b1 / b2b3 of
// the two steps. Dequantization of one pair (int4x8_to_bf16):
//     v = ((w >> 4j) & 0x000f000f) | 0x43004300   (lop3: bf16 128 + n, exact)
//     b = v * 1 - 136                              (fma.bf16x2: n - 8, exact)
// (BF16 has 7 mantissa bits, so a nibble fits only at bits 0..6: four shifted
// copies of the word are needed, 11 instructions per 8 weights.)
// A tail half block stores only words 0 and 1 (8 bytes per lane).
//
// Group scales (FP16, fragment order, per tile): for each block, G = 128 stores
// the 8 channels' scales s[n0 + ch] (lane c reads channels 2c, 2c+1 = 4 bytes at
// offset 4c); G = 64 stores [c][h][2] (lane c reads 8 bytes at offset 8c: both
// halves' scales of channels 2c, 2c+1); a tail half block stores [c][2].
// Per tile that is 8*K/G scales; block b starts at element b * (128/G) * 8.
//
// E4M3 (the W8A16 comparison path) uses the same permutation with one byte per
// weight: per (tile, block) 1024 bytes = [h][lane][16 bytes], lane (g, c) holding
// row g, inputs 64h + 16c + t at byte t (plain order), word i = step 4h + i.
// A tail half block is [lane][16 bytes]. Scales: one FP32 per output channel.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define FUTR_HD __host__ __device__
#include "device/ptx/alu.cuh"
#else
#define FUTR_HD
#endif

namespace futr::layout {

inline constexpr int kTileN = 8;           // output channels per tile (mma N)
inline constexpr int kBlockK = 128;        // inputs per block
inline constexpr int kHalfK = 64;          // inputs per half block (the K granule)
inline constexpr int kStepsPerBlock = 8;   // mma k16 steps per block
inline constexpr int kInt4BlockBytes = 512;   // 8 x 128 nibbles
inline constexpr int kInt4LaneBytes = 16;     // per lane per full block
inline constexpr int kE4M3BlockBytes = 1024;  // 8 x 128 bytes
inline constexpr int kE4M3HalfBytes = 512;    // one half h of an E4M3 block

// Logical offset inside a 128-block of fragment element e of mma step s held by
// lanes with quad index c (see the header comment).
FUTR_HD constexpr int block_k(int c, int s, int e) { return 64 * (s / 4) + 16 * c + 4 * (s % 4) + e; }

// Nibble position inside an INT4 word of the t-th of its 8 consecutive inputs.
FUTR_HD constexpr int int4_nibble(int t) { return (t >> 1) + 4 * (t & 1); }

struct Int4Pos {
  size_t byte;  // byte offset in the packed weight array
  int shift;    // 0 (low nibble) or 4 (high nibble)
};

// Where logical weight (row, col) of an [N, K] INT4 matrix lives. K % 64 == 0.
FUTR_HD inline Int4Pos int4_position(int K, int row, int col) {
  const int tile = row / kTileN, g = row % kTileN;
  const int kb = col / kBlockK, o = col % kBlockK;
  const int h = o / kHalfK, c = (o % kHalfK) / 16, o16 = o % 16;
  const int word = 2 * h + o16 / 8, t = o16 % 8;
  const int lane = 4 * g + c;
  const int p = int4_nibble(t);
  const bool tail_block = (K % kBlockK != 0) && kb == K / kBlockK;
  const size_t lane_bytes = tail_block ? 8 : kInt4LaneBytes;
  const size_t byte = size_t(tile) * (size_t(K) / 2) * kTileN + size_t(kb) * kInt4BlockBytes +
                      lane * lane_bytes + size_t(word) * 4 + size_t(p / 2);
  return {byte, (p % 2) * 4};
}

// Index (in FP16 elements) of the scale of output channel `row`, group `gi`.
FUTR_HD inline size_t int4_scale_index(int K, int group, int row, int gi) {
  const int tile = row / kTileN, ch = row % kTileN;
  const size_t tile_base = size_t(tile) * (size_t(K) / group) * kTileN;
  if (group == kBlockK) return tile_base + size_t(gi) * kTileN + ch;
  // group == 64: block b = gi / 2, half h = gi % 2; lane quad c = ch / 2.
  const int b = gi / 2, h = gi % 2;
  const bool tail_block = (K % kBlockK != 0) && b == K / kBlockK;
  const size_t block_base = tile_base + size_t(b) * 2 * kTileN;
  if (tail_block) return block_base + size_t(ch);
  return block_base + size_t(ch / 2) * 4 + size_t(h) * 2 + size_t(ch % 2);
}

// Byte offset of logical E4M3 weight (row, col) of an [N, K] matrix. K % 64 == 0.
FUTR_HD inline size_t e4m3_position(int K, int row, int col) {
  const int tile = row / kTileN, g = row % kTileN;
  const int kb = col / kBlockK, o = col % kBlockK;
  const int h = o / kHalfK, c = (o % kHalfK) / 16, t = o % 16;
  const int lane = 4 * g + c;
  return size_t(tile) * size_t(K) * kTileN + size_t(kb) * kE4M3BlockBytes +
         size_t(h) * kE4M3HalfBytes + size_t(lane) * 16 + size_t(t);
}

#if defined(__CUDACC__)

// bf16x2 constants of the dequantizers.
inline constexpr uint32_t kBf16x2Magic128 = 0x43004300u;  // {128, 128}
inline constexpr uint32_t kBf16x2One = 0x3F803F80u;       // {1, 1}
inline constexpr uint32_t kBf16x2Neg136 = 0xC308C308u;    // {-136, -136}
inline constexpr uint32_t kBf16x2Exp2_120 = 0x7B807B80u;  // {2^120, 2^120}

// One INT4 word (8 weights = mma steps 2i and 2i+1 of a lane) to B fragments:
// b[0], b[1] = step 2i's {b0b1, b2b3}; b[2], b[3] = step 2i+1's.
// 4 x (shift, lop3, fma) minus one shift = 11 instructions, all exact.
__device__ __forceinline__ void int4x8_to_bf16(uint32_t w, uint32_t (&b)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t v = device::ptx::lop3<device::ptx::kLutAndOr>(w >> (4 * j), 0x000f000fu, kBf16x2Magic128);
    b[j] = device::ptx::fma_bf16x2(v, kBf16x2One, kBf16x2Neg136);
  }
}

// One E4M3 word (4 weights = one mma step) to a B fragment {b0b1, b2b3}.
// prmt sign-extends bytes into 16-bit lanes; (x << 4) & 0x87f0 moves the sign to
// bit 15 and exponent+mantissa to bits 10..4 (a BF16 with the E4M3 exponent
// field, subnormals included); the multiply by 2^120 re-biases 7 -> 127. Exact.
__device__ __forceinline__ void e4m3x4_to_bf16(uint32_t w, uint32_t (&b)[2]) {
  const uint32_t lo = device::ptx::prmt(w, 0u, 0x9180u);  // bytes {w0, sign(w0), w1, sign(w1)}
  const uint32_t hi = device::ptx::prmt(w, 0u, 0xB3A2u);  // bytes {w2, sign(w2), w3, sign(w3)}
  b[0] = device::ptx::mul_bf16x2((lo << 4) & 0x87f087f0u, kBf16x2Exp2_120);
  b[1] = device::ptx::mul_bf16x2((hi << 4) & 0x87f087f0u, kBf16x2Exp2_120);
}

#endif  // __CUDACC__

}  // namespace futr::layout
