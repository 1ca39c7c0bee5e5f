// INT4 (and E4M3) weight packing for the decode GEMMs: the logical quantized
// form <-> the fragment-order form the kernels load (one 16-byte load per lane
// is its mma.sync.m16n8k16 operands: the weights are the A operand, 16 output
// channels x 16 inputs per step). The byte-level contract is
// src/kernels/layout/int4_fragment.cuh; docs/LAYOUTS.md draws it.
//
// Format: symmetric INT4 per output channel n and group of G inputs
//     W[n, k] = q[n, k] * s[n, k / G],   q in [-8, 7],   G = 128 or 64,
// s stored as FP16 (11 significant bits, range 6e-5..65504: the relative error
// a BF16 scale would add, 2^-9, is a fifth of an INT4 step at |q| = 7; FP32 would
// double the scale bytes for no measurable accuracy). Stored nibble = q + 8.
// Shapes: N % 16 == 0, K % 64 == 0, K % G == 0.
//
// Test: tests/quant/int4_pack_test.cpp (round trips and a CPU emulation of the
// kernel's fragment math).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace futr::quant {

// The logical (q, scale) form.
struct Int4Weights {
  int n = 0;                    // output channels N
  int k = 0;                    // inputs K
  int group = 128;              // inputs per scale group G (64 or 128)
  std::vector<int8_t> q;        // [N, K] row-major, values in [-8, 7]
  std::vector<uint16_t> scale;  // [N, K / G] row-major, FP16 bits

  float dequant(int row, int col) const;  // q * s as float
};

// The fragment-order form (what W4Linear uploads).
struct Int4Packed {
  int n = 0, k = 0, group = 128;
  std::vector<uint8_t> weights;  // N * K / 2 bytes, fragment order
  std::vector<uint16_t> scales;  // N * K / G FP16 bits, fragment order
};

// Throws futr::Error naming the problem if (n, k, group) is not supported.
void check_int4_shape(int n, int k, int group);

// Slices of the logical form (tensor parallelism: a rank's shard of a
// projection; runtime/tensor_parallel.h gives the ranges). take_rows: the
// output channels [begin, end) of each range, concatenated in order.
// take_cols: the inputs [begin, end), which must start and end on group
// boundaries (a group's scale belongs to one shard); futr::Error otherwise.
Int4Weights int4_take_rows(const Int4Weights& w, std::span<const std::pair<int, int>> ranges);
Int4Weights int4_take_cols(const Int4Weights& w, int begin, int end);

Int4Packed pack_int4(const Int4Weights& w);
Int4Weights unpack_int4(const Int4Packed& p);

// E4M3 weights for the W8A16 comparison path: [N, K] row-major bytes <->
// fragment order (same permutation, one byte per weight). N % 16 == 0, K % 64 == 0.
std::vector<uint8_t> pack_e4m3(int n, int k, std::span<const uint8_t> rowmajor);
std::vector<uint8_t> unpack_e4m3(int n, int k, std::span<const uint8_t> packed);

}  // namespace futr::quant
