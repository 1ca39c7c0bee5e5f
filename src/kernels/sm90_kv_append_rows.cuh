// sm90_kv_append_rows: the prefill path's K/V append. It writes exactly what
// sm90_kv_append writes (the BF16 primary, the INT4 mirror, RoPE of q and k
// fused in; that file has the rules), for a chunk of thousands of rows:
//
//   pass 1, every thread: items of 8 RoPE pairs (dims d0..d0+7 and their
//     partners d0+D/2..), 16-byte loads and stores, over
//       rows_per_cta rows x (q_heads + 2 kv_heads) head rows x D/16 items:
//       q head:  rotate in place;
//       K head:  rotate, store to the primary (and stage FP32 for the mirror);
//       V head:  copy to the primary (and stage FP32 for the mirror).
//   pass 2 (mirror only), one warp per staged K/V head row:
//       kv_mirror_write_warp (sm90_kv_common.cuh): the same code as the
//       decode append, so the nibbles and scales are the same bytes.
//
// Why a second kernel: sm90_kv_append is one CTA per row with 2-byte accesses
// and one warp per head, right for a decode step of <= 32 rows and ~12x its
// byte floor on a 2048-row prefill chunk (docs/PERF.md, "The prefill chunk per
// kernel"). Here a CTA covers rows_per_cta rows (the row map read once per row
// into shared memory), every access is 16 bytes, and all of the CTA's threads
// work on the q rows, which are most of the bytes (32 of 48 head rows at 8B).
//
// Non-finite values: += 1 per (row, head, K|V) holding one, as sm90_kv_append
// (the D/16 items of a head row are D/16 adjacent lanes: a shuffle reduction).
// PDL: waits (griddepcontrol.wait) before it reads anything.
// Limits: D in {64, 128}; kv_heads <= 16; ld % 8 == 0 and k, v, q 16-byte
// aligned. Launcher: src/launch/decode_attention.cu (kv_append_rows).
// Test: tests/kernels/decode_attention_test.cpp (byte-identical to the CPU
// quantizer and to sm90_kv_append, with RoPE).
#pragma once

#include "kernels/ptx/pdl.cuh"
#include "kernels/sm90_kv_common.cuh"

namespace futr::device {

inline constexpr int kKvRowsThreads = 256;
inline constexpr int kKvRowsMaxPerCta = 4;

// Rows per CTA: up to 4, fewer when the mirror's staging (2 kv_heads rows of D
// FP32 per row) and the kernel's static shared memory would pass 48 KB (the
// limit without an opt-in; the static part is < 1 KB).
__host__ __device__ constexpr int kv_append_rows_per_cta(int kv_heads, int D, bool mirror) {
  if (!mirror) return kKvRowsMaxPerCta;
  const int per_row = 2 * kv_heads * D * 4;
  const int r = (47 * 1024) / per_row;
  return r < 1 ? 1 : (r > kKvRowsMaxPerCta ? kKvRowsMaxPerCta : r);
}

// 8 BF16 values of a 16-byte chunk <-> FP32.
__device__ __forceinline__ void bf16x8_to_float(const uint4 c, float (&f)[8]) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    f[2 * e] = __uint_as_float(w[e] << 16);
    f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 float_to_bf16x8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * e]));
    const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * e + 1]));
    w[e] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The biases of 8 pairs (d0 + j, d0 + j + D/2) of a head row: b points at d0.
template <int D>
__device__ __forceinline__ void add_bias8(float (&lo)[8], float (&hi)[8], const float* b) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    lo[j] = add_bias_bf16(lo[j], b[j]);
    hi[j] = add_bias_bf16(hi[j], b[j + D / 2]);
  }
}

template <int D>
__global__ void __launch_bounds__(kKvRowsThreads)
    sm90_kv_append_rows_kernel(const KvAppendParams p, int rows_per_cta) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  constexpr int kItems = D / 16;     // items (8 pairs each) per head row
  extern __shared__ float staged[];  // mirror: [rows_per_cta][2 kv_heads][D] FP32 (K heads, then V heads)
  __shared__ int slot_s[kKvRowsMaxPerCta], pos_s[kKvRowsMaxPerCta];
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();  // k, v, q and the row map come from earlier kernels
  const int r0 = blockIdx.x * rows_per_cta;
  const int nr = min(rows_per_cta, p.rows - r0);
  if (int(threadIdx.x) < nr) {
    const int r = r0 + int(threadIdx.x);
    pos_s[threadIdx.x] = p.row_pos[r];
    slot_s[threadIdx.x] = layout::kv_slot(p.blocks, p.slot_base, p.row_seq[r], p.row_pos[r]);
  }
  __syncthreads();
  const bool rope = p.rope_cos != nullptr;
  const int qh = ((rope || p.bias) && p.q) ? p.q_heads : 0;
  const int kvh = p.kv_heads;
  const int units = qh + 2 * kvh;  // head rows per row: q heads, K heads, V heads
  const int per_row = units * kItems;
  const int total = nr * per_row;
  const int lane = threadIdx.x % 32;

  // ---- pass 1: 16-byte items ------------------------------------------------
  for (int i0 = 0; i0 < total; i0 += kKvRowsThreads) {  // uniform trip count: the shuffles below
    const int i = i0 + int(threadIdx.x);
    const bool live = i < total;
    const int rr = live ? i / per_row : 0;
    const int rem = i - rr * per_row;
    const int u = rem / kItems, d0 = 8 * (rem % kItems);
    bool kv_unit = false, finite = true;
    if (live) {
      const size_t row_off = size_t(r0 + rr) * size_t(p.ld);
      float lo[8], hi[8];
      float c[8], s[8];
      const bool rotate = rope && u < qh + kvh;  // q and K heads
      if (rotate) {
        const float4* tc = reinterpret_cast<const float4*>(p.rope_cos + size_t(pos_s[rr]) * (D / 2) + d0);
        const float4* ts = reinterpret_cast<const float4*>(p.rope_sin + size_t(pos_s[rr]) * (D / 2) + d0);
        const float4 c0 = tc[0], c1 = tc[1], s0 = ts[0], s1 = ts[1];
        c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z,
        c[7] = c1.w;
        s[0] = s0.x, s[1] = s0.y, s[2] = s0.z, s[3] = s0.w, s[4] = s1.x, s[5] = s1.y, s[6] = s1.z,
        s[7] = s1.w;
      }
      if (u < qh) {  // a query head, rotated in place
        __nv_bfloat16* h = p.q + row_off + size_t(u) * D;
        bf16x8_to_float(*reinterpret_cast<const uint4*>(h + d0), lo);
        bf16x8_to_float(*reinterpret_cast<const uint4*>(h + d0 + D / 2), hi);
        if (p.bias) add_bias8<D>(lo, hi, p.bias + size_t(u) * D + d0);
        if (rotate) {
#pragma unroll
          for (int j = 0; j < 8; ++j) rope_pair(lo[j], hi[j], c[j], s[j]);
        }
        *reinterpret_cast<uint4*>(h + d0) = float_to_bf16x8(lo);
        *reinterpret_cast<uint4*>(h + d0 + D / 2) = float_to_bf16x8(hi);
      } else {  // a K or V head: the primary, and the mirror's staging
        kv_unit = true;
        const int kvu = u - qh;  // 0..2 kvh - 1: K heads, then V heads
        const bool is_v = kvu >= kvh;
        const int head = is_v ? kvu - kvh : kvu;
        const __nv_bfloat16* src = (is_v ? p.v : p.k) + row_off + size_t(head) * D;
        bf16x8_to_float(*reinterpret_cast<const uint4*>(src + d0), lo);
        bf16x8_to_float(*reinterpret_cast<const uint4*>(src + d0 + D / 2), hi);
        if (p.bias) add_bias8<D>(lo, hi, p.bias + size_t(p.q_heads + kvu) * D + d0);
        if (rotate) {
#pragma unroll
          for (int j = 0; j < 8; ++j) rope_pair(lo[j], hi[j], c[j], s[j]);
        }
        __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(is_v ? p.cache.v : p.cache.k) +
                             layout::kv_primary_index(kvh, D, slot_s[rr], head, 0);
        *reinterpret_cast<uint4*>(dst + d0) = float_to_bf16x8(lo);  // exact: BF16 values
        *reinterpret_cast<uint4*>(dst + d0 + D / 2) = float_to_bf16x8(hi);
#pragma unroll
        for (int j = 0; j < 8; ++j) finite = finite && isfinite(lo[j]) && isfinite(hi[j]);
        if (p.mirror) {
          float* x = staged + (size_t(rr) * size_t(2 * kvh) + size_t(kvu)) * D;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            x[d0 + j] = lo[j];
            x[d0 + D / 2 + j] = hi[j];
          }
        }
      }
    }
    // One count per K/V head row with a non-finite value: its kItems items are
    // kItems adjacent lanes (head rows start at multiples of kItems, i0 at 256).
    int bad = kv_unit && !finite;
#pragma unroll
    for (int o = 1; o < kItems; o *= 2) bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    if (bad && kv_unit && d0 == 0 && p.nonfinite) atomicAdd(p.nonfinite, 1);
  }
  if (!p.mirror) return;
  __syncthreads();

  // ---- pass 2: the INT4 mirror, one warp per staged K/V head row --------------
  const int warp = threadIdx.x / 32;
  for (int w = warp; w < nr * 2 * kvh; w += kKvRowsThreads / 32) {
    const int rr = w / (2 * kvh), kvu = w % (2 * kvh);
    const bool is_v = kvu >= kvh;
    kv_mirror_write_warp<D>(staged + size_t(w) * D, p.cache, kvh, slot_s[rr], is_v ? kvu - kvh : kvu, is_v,
                            p.rot_block, lane);
  }
}

}  // namespace futr::device
