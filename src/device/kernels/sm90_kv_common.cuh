// Shared pieces of the KV-cache kernels (sm90_kv_append, sm90_decode_attention,
// sm90_decode_attention_combine): the cache pointers of one layer, the query
// row map, and the block Walsh-Hadamard transform of rows in shared memory.
//
// hadamard_rows_smem() computes exactly what quant::hadamard_rotate() computes
// on the CPU: per block of b values, log2(b) butterfly stages (a, c) -> (a + c,
// a - c) at distances 1, 2, ..., b/2, then one multiply by 1 / sqrt(b), all in
// FP32 round-to-nearest (the __f*_rn intrinsics keep nvcc from contracting the
// multiply into anything), so the INT4 mirror the append kernel writes is
// byte-identical to the CPU quantizer's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/layout/kv_cache.cuh"

namespace futr::device {

enum class KvKind : int { kBf16 = 0, kInt4 = 1 };

using layout::KvLayerPtrs;

// x[r * ld + j], rows r < n_rows, j < D: rotated in place by the normalized
// block Walsh-Hadamard transform of block b (a power of two dividing D).
// Called by all `nthreads` threads of a group that synchronizes with `sync()`.
template <class Sync>
__device__ __forceinline__ void hadamard_rows_smem(float* x, int n_rows, int ld, int D, int b, int tid,
                                                   int nthreads, Sync sync) {
  const int pairs = n_rows * (D / 2);
  for (int h = 1; h < b; h *= 2) {
    for (int i = tid; i < pairs; i += nthreads) {
      const int r = i / (D / 2), k = i % (D / 2);
      // k-th pair of the row at distance h: block-local index j with bit h clear.
      const int j = (k / h) * 2 * h + k % h;
      float* v = x + r * ld;
      const float a = v[j], c = v[j + h];
      v[j] = __fadd_rn(a, c);
      v[j + h] = __fsub_rn(a, c);
    }
    sync();
  }
  const float norm = __fdiv_rn(1.0f, __fsqrt_rn(float(b)));
  for (int i = tid; i < n_rows * D; i += nthreads) {
    float* v = x + (i / D) * ld + i % D;
    *v = __fmul_rn(*v, norm);
  }
  sync();
}

}  // namespace futr::device
