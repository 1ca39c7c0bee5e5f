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
// Limits: D in {64, 128}; kv_heads <= 16. Launcher: src/cuda/decode_attention.cu.
// Test: tests/device/decode_attention_test.cpp (byte-identical to the CPU).
#pragma once

#include "device/kernels/sm90_kv_common.cuh"

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
};

template <int D>
__global__ void __launch_bounds__(1024) sm90_kv_append_kernel(const KvAppendParams p) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  constexpr int kPer = D / 32;  // values per lane
  __shared__ float rows_smem[32][D];  // one row per warp (<= 32 warps)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x;
  const int head = warp / 2;
  const bool is_v = warp % 2;
  if (head >= p.kv_heads) return;
  const int slot = p.slot_base[p.row_seq[r]] + p.row_pos[r];

  // ---- the BF16 primary -----------------------------------------------------
  const __nv_bfloat16* src = (is_v ? p.v : p.k) + size_t(r) * size_t(p.ld) + size_t(head) * D;
  __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(is_v ? p.cache.v : p.cache.k) +
                       layout::kv_primary_index(p.kv_heads, D, slot, head, 0);
  float* x = rows_smem[warp];
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    const __nv_bfloat16 e = src[d];
    dst[d] = e;
    x[d] = __bfloat162float(e);
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
