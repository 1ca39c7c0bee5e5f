// Shared pieces of the KV-cache kernels (sm90_kv_append, sm90_kv_append_rows,
// sm90_decode_attention, sm90_decode_attention_combine): the cache pointers of
// one layer, the query row map, the block Walsh-Hadamard transform of rows in
// shared memory, RoPE of one pair, and the INT4 mirror's row quantization.
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

#include "kernels/layout/kv_cache.cuh"

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

// The arguments of the two append kernels (sm90_kv_append: one CTA per row,
// the decode step's; sm90_kv_append_rows: several rows per CTA, the prefill's).
struct KvAppendParams {
  const __nv_bfloat16* k = nullptr;  // [rows] rows of kv_heads * D, row stride ld (K after RoPE)
  const __nv_bfloat16* v = nullptr;  // [rows] rows of kv_heads * D, row stride ld
  int64_t ld = 0;                    // elements between consecutive rows of k (and v)
  const int* row_seq = nullptr;      // [rows] sequence index of each row
  const int* row_pos = nullptr;      // [rows] its position in the sequence
  const int* slot_base = nullptr;    // [sequences] first slot of each sequence (multiple of 16)
  layout::KvBlockTable blocks;       // or a paged cache's block tables (then slot_base is unused)
  KvLayerPtrs cache;
  int rows = 0, kv_heads = 0;
  int rot_block = 0;                // 0: mirror not rotated; else the Hadamard block
  bool mirror = false;              // write the INT4 mirror too
  int* nonfinite = nullptr;         // optional: += 1 per (row, head, K|V) with a non-finite value
  const float* rope_cos = nullptr;  // optional [max_pos][D/2]: RoPE fused in (model/rope.h's table)
  const float* rope_sin = nullptr;
  __nv_bfloat16* q = nullptr;  // [rows] rows of q_heads * D, stride ld: rotated in place (rope or bias)
  int q_heads = 0;
  // optional [q_heads * D | kv_heads * D | kv_heads * D] FP32: the q, k and v
  // projections' biases (qwen2), added to each value (then rounded to BF16)
  // before RoPE: q in place, k and v on their way into the cache.
  const float* bias = nullptr;
};

// x + b rounded to BF16 (the biased projection output, as the cache stores it).
__device__ __forceinline__ float add_bias_bf16(float x, float b) {
  return __bfloat162float(__float2bfloat16_rn(x + b));
}

// RoPE of one pair (x_d, x_{d+D/2}) at angle (c, s), each op rounded as in
// sm90_rope.cuh, the results rounded to BF16.
__device__ __forceinline__ void rope_pair(float& a, float& b, float c, float s) {
  const float lo = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  const float hi = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  a = __bfloat162float(__float2bfloat16_rn(lo));
  b = __bfloat162float(__float2bfloat16_rn(hi));
}

// The INT4 mirror of one K or V head row, by one warp: x (smem, D FP32
// values, the row's BF16 values) is rotated in place (rot_block > 0), then
// quantized per row: s = amax / 7, nibble = clamp(rne(x / s), -7, 7) + 8
// (s == 0: 8), each lane writing whole bytes (two dims), lane 0 the scale.
// The one home of the mirror's quantization on the GPU (sm90_kv_append and
// sm90_kv_append_rows call it), byte-identical to quant/kv_int4.h.
template <int D>
__device__ __forceinline__ void kv_mirror_write_warp(float* x, const KvLayerPtrs& cache, int kv_heads,
                                                     int slot, int head, bool is_v, int rot_block, int lane) {
  constexpr int kPer = D / 32;  // values per lane
  __syncwarp();
  if (rot_block > 0) hadamard_rows_smem(x, 1, D, D, rot_block, lane, 32, [] { __syncwarp(); });
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) amax = fmaxf(amax, fabsf(x[lane + 32 * i]));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = __fdiv_rn(amax, 7.0f);
  uint8_t* nib = is_v ? cache.v4 : cache.k4;
#pragma unroll
  for (int i = 0; i < D / 64; ++i) {
    const int d = 2 * (lane + 32 * i);
    int n[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float q = s == 0.f ? 0.f : fminf(fmaxf(rintf(__fdiv_rn(x[d + e], s)), -7.f), 7.f);
      n[e] = int(q) + 8;
    }
    const layout::KvNibble at = is_v ? layout::kv_value_nibble(kv_heads, D, slot, head, d)
                                     : layout::kv_key_nibble(kv_heads, D, slot, head, d);
    nib[at.byte] = uint8_t(n[0] | (n[1] << 4));
  }
  if (lane == 0) (is_v ? cache.vs : cache.ks)[layout::kv_scale_index(cache.num_slots, slot, head)] = s;
}

}  // namespace futr::device
