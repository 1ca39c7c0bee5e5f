// sm90_decode_attention_combine: the second pass of split-KV decode attention.
// For each (sequence b, query head j), the S chunks' partial results of
// sm90_decode_attention (running max m_s in log2 units, sum l_s, unnormalized
// O_s) are merged:
//
//   M = max_s m_s,   w_s = 2^(m_s - M),   out = (sum_s w_s O_s) / (sum_s w_s l_s)
//
// then rotated back (out H, rotated mirror) and written as BF16. One CTA of D
// threads per (head, sequence); chunks with m_s = -inf (no tokens) weigh 0.
// Limits: D in {64, 128}. Test: tests/device/decode_attention_test.cpp.
#pragma once

#include "device/kernels/sm90_decode_attention.cuh"

namespace futr::device {

template <int D>
__global__ void __launch_bounds__(D) sm90_decode_attention_combine_kernel(const DecodeAttentionParams p) {
  __shared__ float row[D];
  const int d = threadIdx.x, j = blockIdx.x, b = blockIdx.y;
  const int n_heads = p.kv_heads * p.group;
  const size_t r = size_t(b) * n_heads + j;
  const float* ml = p.ml_part + r * p.splits * 2;
  const float* op = p.o_part + r * p.splits * D;
  float mmax = -INFINITY;
  for (int s = 0; s < p.splits; ++s) mmax = fmaxf(mmax, ml[2 * s]);
  const float mref = mmax == -INFINITY ? 0.f : mmax;
  float l = 0.f, acc = 0.f;
  for (int s = 0; s < p.splits; ++s) {
    const float w = exp2f(ml[2 * s] - mref);
    l += w * ml[2 * s + 1];
    acc += w * op[size_t(s) * D + d];
  }
  row[d] = l > 0.f ? acc / l : 0.f;
  __syncthreads();
  if (p.rot_block > 0) hadamard_rows_smem(row, 1, D, D, p.rot_block, d, D, [] { __syncthreads(); });
  p.out[r * D + d] = __float2bfloat16_rn(row[d]);
}

}  // namespace futr::device
