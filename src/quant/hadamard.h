// Block-diagonal Walsh-Hadamard rotation of KV-cache rows (INT4 KV mirror).
//
// For a row x of D values and a block size b (a power of two dividing D):
//     x' = x H,   H = diag(H_b, ..., H_b) (D / b blocks),   H_b = S_b / sqrt(b)
// with S_b the Sylvester matrix (S_1 = [1], S_2m = [[S_m, S_m], [S_m, -S_m]]),
// entry (i, j) = (-1)^popcount(i & j). H_b is symmetric and orthogonal
// (H_b H_b = I), so H is its own inverse: the same function rotates and
// un-rotates, and (q H).(k H) = q.k.
//
// Computed as the fast transform: log2(b) butterfly stages (a, b) -> (a + b,
// a - b) on pairs at distance 1, 2, ..., b/2, then one multiply by 1/sqrt(b)
// (FP32; b in {16, 64}: 1/4, 1/8 exact powers of two; b = 32: rounded).
//
// Tests: tests/quant/kv_int4_test.cpp (orthogonality, self-inverse, against
// the explicit matrix).
#pragma once

#include <cstdint>

namespace futr::quant {

// True for b in {1, 2, 4, ...} with D % b == 0.
bool hadamard_block_ok(int d, int block);

// x[0..d) <- x H (block-diagonal, normalized). d % block == 0, block a power of two.
void hadamard_rotate(float* x, int d, int block);

// Applies hadamard_rotate to `heads` consecutive head vectors of head_dim
// values in each of n rows with row stride ld.
void hadamard_rotate_heads(float* x, int64_t n, int64_t ld, int heads, int head_dim, int block);

}  // namespace futr::quant
