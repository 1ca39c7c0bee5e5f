// sm90_kv_append: writes the K and V rows of new tokens into the KV cache of one
// layer: the BF16 primary and, when the cache has one, the INT4 mirror
// (device/layout/kv_cache.cuh), exactly as the CPU quantizer does
// (quant/kv_int4.h, cpu::QuantKvStorage::write):
//
//   for each new row r (sequence seq[r], position pos[r]) and KV head h:
//     slot = slot_base[seq[r]] + pos[r]
//     primary[slot][h] = k_r,h (BF16, as given)            (and v)
//     x = float(k_r,h); x = x H      (rotated mirror only: block Walsh-Hadamard)
//     s = amax(x) / 7; n_d = clamp(rne(x_d / s), -7, 7) + 8   (s == 0: n_d = 8)
//     nibbles of (slot, h) <- n; scale[h][slot] <- s             (and V)
//
// One warp per (row, head, K or V): blockDim = 64 * kv_heads (<= 1024), grid =
// rows. The row is staged in shared memory for the rotation (FP32, the CPU's
// butterfly order: sm90_kv_common.cuh). Each lane then writes whole bytes (two
// dims), so no two lanes touch one byte. A row holding a non-finite value is
// still written (the kernel cannot throw) and counted in *nonfinite, which the
// engine checks after the step (the CPU storage refuses such rows).
//
// RoPE fused in (optional, rope_cos != null): K is rotated at the row's
// position before it is written, by the rule of sm90_rope.cuh (dim i pairs
// with i + D/2, FP32 with each op rounded, then BF16), and the q_heads query
// heads of the row (at q, same row stride) are rotated in place, spread over
// the CTA's warps: one launch instead of sm90_rope + this kernel, bit-identical
// to the two (a lane holds both dims of each of its pairs: d and d + D/2).
//
// PDL: launched as a programmatic dependent, it waits (griddepcontrol.wait)
// before it reads anything.
//
// Limits: D in {64, 128}; kv_heads <= 16. Launcher: src/cuda/decode_attention.cu.
// Test: tests/device/decode_attention_test.cpp (byte-identical to the CPU).
#pragma once

#include "device/kernels/sm90_kv_common.cuh"
#include "device/ptx/pdl.cuh"

namespace futr::device {

struct KvAppendParams {
  const __nv_bfloat16* k = nullptr;  // [rows] rows of kv_heads * D, row stride ld (K after RoPE)
  const __nv_bfloat16* v = nullptr;  // [rows] rows of kv_heads * D, row stride ld
  int64_t ld = 0;                    // elements between consecutive rows of k (and v)
  const int* row_seq = nullptr;      // [rows] sequence index of each row
  const int* row_pos = nullptr;      // [rows] its position in the sequence
  const int* slot_base = nullptr;    // [sequences] first slot of each sequence (multiple of 16)
  KvLayerPtrs cache;
  int rows = 0, kv_heads = 0;
  int rot_block = 0;                 // 0: mirror not rotated; else the Hadamard block
  bool mirror = false;               // write the INT4 mirror too
  int* nonfinite = nullptr;          // optional: += 1 per (row, head, K|V) with a non-finite value
  const float* rope_cos = nullptr;   // optional [max_pos][D/2]: RoPE fused in (model/rope.h's table)
  const float* rope_sin = nullptr;
  __nv_bfloat16* q = nullptr;        // [rows] rows of q_heads * D, stride ld: rotated in place (rope only)
  int q_heads = 0;
};

// RoPE of one pair (x_d, x_{d+D/2}) at angle (c, s), each op rounded as in
// sm90_rope.cuh, the results rounded to BF16.
__device__ __forceinline__ void rope_pair(float& a, float& b, float c, float s) {
  const float lo = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  const float hi = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  a = __bfloat162float(__float2bfloat16_rn(lo));
  b = __bfloat162float(__float2bfloat16_rn(hi));
}

template <int D>
__global__ void __launch_bounds__(1024) sm90_kv_append_kernel(const KvAppendParams p) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  constexpr int kPer = D / 32;  // values per lane
  __shared__ float rows_smem[32][D];  // one row per warp (<= 32 warps)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x;
  const int head = warp / 2;
  const bool is_v = warp % 2;
  ptx::griddep_launch_dependents();  // PDL (ptx/pdl.cuh): the next kernel may launch
  ptx::griddep_wait();               // k, v, q and the row map come from earlier kernels
  if (head >= p.kv_heads) return;
  const int slot = p.slot_base[p.row_seq[r]] + p.row_pos[r];
  const bool rope = p.rope_cos != nullptr;
  const float* rc = rope ? p.rope_cos + size_t(p.row_pos[r]) * (D / 2) : nullptr;
  const float* rs = rope ? p.rope_sin + size_t(p.row_pos[r]) * (D / 2) : nullptr;

  // ---- the query heads' RoPE, in place (fused path only) ---------------------------
  if (rope && p.q) {
    for (int h = warp; h < p.q_heads; h += 2 * p.kv_heads) {
      __nv_bfloat16* qh = p.q + size_t(r) * size_t(p.ld) + size_t(h) * D;
#pragma unroll
      for (int i = 0; i < kPer / 2; ++i) {
        const int d = lane + 32 * i;
        float a = __bfloat162float(qh[d]), b = __bfloat162float(qh[d + D / 2]);
        rope_pair(a, b, rc[d], rs[d]);
        qh[d] = __float2bfloat16_rn(a);
        qh[d + D / 2] = __float2bfloat16_rn(b);
      }
    }
  }

  // ---- the BF16 primary -----------------------------------------------------
  const __nv_bfloat16* src = (is_v ? p.v : p.k) + size_t(r) * size_t(p.ld) + size_t(head) * D;
  __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(is_v ? p.cache.v : p.cache.k) +
                       layout::kv_primary_index(p.kv_heads, D, slot, head, 0);
  float* x = rows_smem[warp];
  float e[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) e[i] = __bfloat162float(src[lane + 32 * i]);
  if (rope && !is_v) {
#pragma unroll
    for (int i = 0; i < kPer / 2; ++i) rope_pair(e[i], e[i + kPer / 2], rc[lane + 32 * i], rs[lane + 32 * i]);
  }
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    dst[d] = __float2bfloat16_rn(e[i]);  // exact: e[i] is a BF16 value
    x[d] = e[i];
    finite = finite && isfinite(x[d]);
  }
  finite = __all_sync(0xffffffffu, finite);
  if (!finite && lane == 0 && p.nonfinite) atomicAdd(p.nonfinite, 1);
  if (!p.mirror) return;
  __syncwarp();

  // ---- rotation and row quantization (FP32, as the CPU) ----------------------
  if (p.rot_block > 0) hadamard_rows_smem(x, 1, D, D, p.rot_block, lane, 32, [] { __syncwarp(); });
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) amax = fmaxf(amax, fabsf(x[lane + 32 * i]));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = __fdiv_rn(amax, 7.0f);

  // ---- nibbles: lane writes the bytes of dims (2j, 2j + 1) ---------------------
  uint8_t* nib = is_v ? p.cache.v4 : p.cache.k4;
#pragma unroll
  for (int i = 0; i < D / 64; ++i) {
    const int d = 2 * (lane + 32 * i);
    int n[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float q = s == 0.f ? 0.f : fminf(fmaxf(rintf(__fdiv_rn(x[d + e], s)), -7.f), 7.f);
      n[e] = int(q) + 8;
    }
    const layout::KvNibble at = is_v ? layout::kv_value_nibble(p.kv_heads, D, slot, head, d)
                                     : layout::kv_key_nibble(p.kv_heads, D, slot, head, d);
    nib[at.byte] = uint8_t(n[0] | (n[1] << 4));
  }
  if (lane == 0) (is_v ? p.cache.vs : p.cache.ks)[layout::kv_scale_index(p.cache.num_slots, slot, head)] = s;
}

}  // namespace futr::device
