// Fast block-diagonal Walsh-Hadamard transform (see hadamard.h).
#include "quant/hadamard.h"

#include <cmath>

#include "core/error.h"

namespace futr::quant {

bool hadamard_block_ok(int d, int block) {
  return block >= 1 && (block & (block - 1)) == 0 && d > 0 && d % block == 0;
}

void hadamard_rotate(float* x, int d, int block) {
  FUTR_CHECK(hadamard_block_ok(d, block),
             "Hadamard rotation: block {} must be a power of two dividing the row length {}", block, d);
  const float norm = 1.0f / std::sqrt(float(block));
  for (int b0 = 0; b0 < d; b0 += block) {
    float* v = x + b0;
    for (int h = 1; h < block; h *= 2)
      for (int i = 0; i < block; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
    for (int j = 0; j < block; ++j) v[j] *= norm;
  }
}

void hadamard_rotate_heads(float* x, int64_t n, int64_t ld, int heads, int head_dim, int block) {
  FUTR_CHECK(hadamard_block_ok(head_dim, block),
             "Hadamard rotation: block {} must be a power of two dividing head_dim {}", block, head_dim);
#pragma omp parallel for schedule(static) if (n * heads >= 64)
  for (int64_t i = 0; i < n; ++i)
    for (int h = 0; h < heads; ++h) hadamard_rotate(x + i * ld + int64_t(h) * head_dim, head_dim, block);
}

}  // namespace futr::quant
