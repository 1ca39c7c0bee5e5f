// sm90_kv_append: writes the K and V rows of new tokens into the KV cache of one
// layer: the BF16 primary and, when the cache has one, the INT4 mirror
// (kernels/layout/kv_cache.cuh), exactly as the CPU quantizer does
// (quant/kv_int4.h, cpu::QuantKvStorage::write):
//
//   for each new row r (sequence seq[r], position pos[r]) and KV head h:
//     slot = slot_base[seq[r]] + pos[r]   (paged: through the block table, layout::kv_slot)
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
// Biases fused in (optional, bias != null: qwen2's q/k/v projection biases):
// each value of q, k and v gets its bias added and rounded to BF16 before the
// RoPE (q in place; k and v on their way into the cache).
//
// PDL: launched as a programmatic dependent, it waits (griddepcontrol.wait)
// before it reads anything.
//
// Limits: D in {64, 128}; kv_heads <= 16. Launcher: src/launch/decode_attention.cu.
// Test: tests/kernels/decode_attention_test.cpp (byte-identical to the CPU).
// Work unit: kv_append_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include "kernels/ptx/pdl.cuh"
#include "kernels/sm90_kv_common.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

// Shared memory of one unit: one staged row per warp (<= 32 warps).
template <int D>
struct KvAppendSmem {
  float rows[32][D];
};

// One row (work_unit.h): unit = the row, 64 * kv_heads threads.
template <int D, class Deps>
__device__ __forceinline__ void kv_append_unit(const KvAppendParams& p, int unit, int /*units*/,
                                               KvAppendSmem<D>& sm, const Deps& deps) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  constexpr int kPer = D / 32;  // values per lane
  float(&rows_smem)[32][D] = sm.rows;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = unit;
  const int head = warp / 2;
  const bool is_v = warp % 2;
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  deps.wait();     // k, v, q and the row map come from earlier ops
  if (head >= p.kv_heads) return;
  const int slot = layout::kv_slot(p.blocks, p.slot_base, p.row_seq[r], p.row_pos[r]);
  const bool rope = p.rope_cos != nullptr;
  const float* rc = rope ? p.rope_cos + size_t(p.row_pos[r]) * (D / 2) : nullptr;
  const float* rs = rope ? p.rope_sin + size_t(p.row_pos[r]) * (D / 2) : nullptr;

  // ---- the query heads' bias and RoPE, in place -----------------------------------
  if ((rope || p.bias) && p.q) {
    for (int h = warp; h < p.q_heads; h += 2 * p.kv_heads) {
      __nv_bfloat16* qh = p.q + size_t(r) * size_t(p.ld) + size_t(h) * D;
#pragma unroll
      for (int i = 0; i < kPer / 2; ++i) {
        const int d = lane + 32 * i;
        float a = __bfloat162float(qh[d]), b = __bfloat162float(qh[d + D / 2]);
        if (p.bias) {
          a = add_bias_bf16(a, p.bias[h * D + d]);
          b = add_bias_bf16(b, p.bias[h * D + d + D / 2]);
        }
        if (rope) rope_pair(a, b, rc[d], rs[d]);
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
  if (p.bias) {
    const float* b = p.bias + (p.q_heads + (is_v ? p.kv_heads : 0) + head) * D;
#pragma unroll
    for (int i = 0; i < kPer; ++i) e[i] = add_bias_bf16(e[i], b[lane + 32 * i]);
  }
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
  kv_mirror_write_warp<D>(x, p.cache, p.kv_heads, slot, head, is_v, p.rot_block, lane);
}

template <int D>
__global__ void __launch_bounds__(1024) sm90_kv_append_kernel(const KvAppendParams p) {
  __shared__ KvAppendSmem<D> sm;
  kv_append_unit<D>(p, blockIdx.x, gridDim.x, sm, PdlDeps{});
}

}  // namespace futr::device
