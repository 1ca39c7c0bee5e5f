// sm90_decode_attention_step: the operand loads of one 16-token step of one
// warp of the decode attention (sm90_decode_attention.cuh), per KV cache
// format. Step<D, kInt4> streams the INT4 mirror's fragment-ordered K and V
// bytes and their scales through a lane-private cp.async ring (issue) and
// reads a landed stage back into the lane's operand registers (read);
// Step<D, kBf16> loads the BF16 cache's K and V rows as operands (load). The
// kernel dequantizes and runs the MMAs (operand roles: its header). Plus the
// packing and load helpers both share, and the constants the unit's shared
// memory is sized by.
#pragma once

#include "kernels/ptx/cp_async.cuh"
#include "kernels/ptx/mma.cuh"
#include "kernels/sm90_kv_common.cuh"

namespace futr::device {

inline constexpr int kAttnWarps = 4;   // warps per CTA
inline constexpr int kAttnStages = 4;  // INT4 mirror: steps in flight per warp (cp.async ring)

// P of the BF16 path as hi + lo (two BF16 MMAs per step, 16 significant bits
// instead of 8). Why: P in BF16 alone adds rounding noise the reference's FP32
// softmax does not have, and noise raises perplexity. Measured on the H200
// (docs/PERF.md, decode attention): the bf16 rows of
// the benchmark within +-3% (memory-bound), the 32k-token bf16 perplexity
// against the CPU reference from +0.0121 to +0.0075 (mean KL 3.30e-4 -> 2.95e-4).
inline constexpr bool kAttnSplitP = true;

namespace attn {

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_bf162(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// The pair (a, b) as two BF16 pairs h + l equal to it to 16 significant bits:
// h = bf16(x), l = bf16(x - h) (the subtraction is exact in FP32).
__device__ __forceinline__ void split_bf162(float a, float b, uint32_t& h, uint32_t& l) {
  h = pack_bf162(a, b);
  l = pack_bf162(a - __uint_as_float(h << 16), b - __uint_as_float(h & 0xffff0000u));
}
// ex2.approx.ftz.f32: 2^x in one MUFU op; why: exp2f's subnormal handling adds
// a compare and two multiplies per call, and results below 2^-126 weigh nothing.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
// 16 bytes / 8 bytes / 4 bytes of read-once cache data: no L1 allocation.
__device__ __forceinline__ void ld_nc(uint32_t (&r)[4], const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "l"(p));
}
__device__ __forceinline__ void ld_nc(uint32_t (&r)[2], const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
}
__device__ __forceinline__ void ld_nc(uint32_t (&r)[1], const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.b32 %0, [%1];\n" : "=r"(r[0]) : "l"(p));
}

// The query dim that meets k column `col` of mma step `m` in S^T = K Q^T over
// the BF16 cache: a lane loads 8 consecutive dims [32i + 8c, +8) of a token
// (16 bytes), registers j = 0..3 = dims 32i + 8c + 2j + {0, 1}; step 2i + h
// uses j = 2h (columns 2c, 2c+1) and j = 2h + 1 (columns 2c+8, 2c+9).
__device__ __forceinline__ int bf16_query_dim(int m, int col) {
  const int i = m / 2, h = m % 2, hi8 = col / 8, c = (col % 8) / 2, p = col % 2;
  return 32 * i + 8 * c + 4 * h + 2 * hi8 + p;
}

// One 16-token step's cache bytes held by a lane.
template <int D, KvKind KIND>
struct Step;

// INT4 mirror: K words of tokens g (tile 0) and g + 8 (tile 1); V bytes of
// tokens 2c, 2c+1, 2c+8, 2c+9 at [g * D/16, +D/16); the four scales. Brought
// in by 16-byte cp.async copies (L1 bypassed) into the warp's stage of a
// shared-memory ring, kAttnStages steps deep: K as each lane's own fragment
// bytes, V rows and the scales as they lie in memory (read back across lanes
// after a __syncwarp).
template <int D>
struct Step<D, KvKind::kInt4> {
  static constexpr int kKW = D / 32;                  // K words per lane per tile
  static constexpr int kVW = D / 64;                  // V words per lane per token
  static constexpr int kKB = 4 * kKW, kVB = 4 * kVW;  // bytes
  // NOTE: V rows padded by 16 bytes: the lanes reading token rows 2c (+1,
  // +8, +9) at byte 8g (D 128) or 4g (D 64) then hit distinct banks.
  static constexpr int kVRow = D / 2 + 16;
  static constexpr int kVOff = 64 * kKB;            // K: [tile][lane][kKB]
  static constexpr int kSOff = kVOff + 16 * kVRow;  // V: [token][kVRow]; scales: ks[16], vs[16]
  static constexpr int kStageBytes = kSOff + 128;   // one warp's stage
  static_assert(kStageBytes % 16 == 0, "16-byte aligned stages");
  uint32_t k[2][kKW];
  uint32_t v[4][kVW];
  float ks[2], vs[2];  // tokens g, g + 8

  // A lane's global addresses for the warp's first step, and the byte strides
  // to the next 8-slot tile and to the next token.
  struct Cursor {
    const uint8_t* k;  // K: tile 0 of the head (32 x kKB bytes, contiguous)
    const uint8_t* v;  // V: token `lane / (D/32)` of the step, 16-byte part `lane % (D/32)`
    const float* s;    // lanes 0..3: K scales [4 lane, +4); lanes 4..7: V scales [4 (lane - 4), +4)
    int64_t k_tile;    // bytes from one tile of all heads to the next
    int64_t v_tok;     // bytes from one token's V rows to the next
  };
  static constexpr int kVParts = D / 32;  // 16-byte parts of a V row

  static __device__ __forceinline__ Cursor cursor(const KvLayerPtrs& c, int kv_heads, int head, int slot0,
                                                  int lane) {
    Cursor r;
    const int64_t tile_bytes = int64_t(kv_heads) * 32 * kKB;  // one 8-slot tile of all heads
    r.k = c.k4 + (int64_t(slot0 / layout::kKvTileSlots) * tile_bytes + int64_t(head) * 32 * kKB);
    r.v_tok = int64_t(kv_heads) * (D / 2);
    r.v = c.v4 + int64_t(slot0 + lane / kVParts) * r.v_tok + int64_t(head) * (D / 2) + (lane % kVParts) * 16;
    r.s = (lane < 4 ? c.ks : c.vs) + layout::kv_scale_index(c.num_slots, slot0, head) + 4 * (lane % 4);
    r.k_tile = tile_bytes;
    return r;
  }

  // Copies the 16-slot step starting `rel` slots after the cursor's first
  // slot (a multiple of 16) into stage `st`.
  static __device__ __forceinline__ void issue(uint8_t* st, const Cursor& c, int rel, int lane) {
    const uint8_t* k = c.k + (rel / layout::kKvTileSlots) * c.k_tile;
#pragma unroll
    for (int q = 0; q < kKB / 8; ++q) {  // 2 tiles x 2 kKB parts of 16 bytes = 32 * kKB / 8 copies
      const int chunk = lane + 32 * q, tile = chunk / (2 * kKB), part = chunk % (2 * kKB);
      ptx::cp_async_16_cg(st + tile * 32 * kKB + part * 16, k + tile * c.k_tile + part * 16);
    }
#pragma unroll
    for (int q = 0; q < kVW; ++q) {  // 16 tokens x kVParts parts = 32 * kVW copies
      const int tok = lane / kVParts + q * (32 / kVParts);
      ptx::cp_async_16_cg(st + kVOff + tok * kVRow + (lane % kVParts) * 16,
                          c.v + (rel + q * (32 / kVParts)) * c.v_tok);
    }
    if (lane < 8) ptx::cp_async_16_cg(st + kSOff + 16 * lane, c.s + rel);
  }

  __device__ __forceinline__ void read(const uint8_t* st, int lane) {
    const int g = lane / 4, cq = lane % 4;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const uint32_t* kp = reinterpret_cast<const uint32_t*>(st + (32 * t + lane) * kKB);
#pragma unroll
      for (int w = 0; w < kKW; ++w) k[t][w] = kp[w];
    }
    const float* sp = reinterpret_cast<const float*>(st + kSOff);
    ks[0] = sp[g];
    ks[1] = sp[8 + g];
    vs[0] = sp[16 + g];
    vs[1] = sp[24 + g];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int tok = 2 * cq + (j % 2) + 8 * (j / 2);
      const uint32_t* vp = reinterpret_cast<const uint32_t*>(st + kVOff + tok * kVRow + g * kVB);
#pragma unroll
      for (int w = 0; w < kVW; ++w) v[j][w] = vp[w];
    }
  }
};

// BF16 cache: K dims [32i + 8c, +8) of tokens g and g + 8; V dims
// [g * D/8, +D/8) of tokens 2c, 2c+1, 2c+8, 2c+9.
template <int D>
struct Step<D, KvKind::kBf16> {
  static constexpr int kKW = D / 8;   // K words per lane per token (D/32 loads of 4 words)
  static constexpr int kVW = D / 16;  // V words per lane per token
  uint32_t k[2][kKW];
  uint32_t v[4][kVW];

  __device__ __forceinline__ void load(const KvLayerPtrs& c, int kv_heads, int head, int slot0, int lane) {
    const int g = lane / 4, cq = lane % 4;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const __nv_bfloat16* kp = reinterpret_cast<const __nv_bfloat16*>(c.k) +
                                layout::kv_primary_index(kv_heads, D, slot0 + 8 * t + g, head, 8 * cq);
#pragma unroll
      for (int i = 0; i < D / 32; ++i) {
        uint32_t w[4];
        ld_nc(w, kp + 32 * i);
#pragma unroll
        for (int e = 0; e < 4; ++e) k[t][4 * i + e] = w[e];
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int tok = 2 * cq + (j % 2) + 8 * (j / 2);
      const __nv_bfloat16* vp = reinterpret_cast<const __nv_bfloat16*>(c.v) +
                                layout::kv_primary_index(kv_heads, D, slot0 + tok, head, g * (D / 8));
#pragma unroll
      for (int i = 0; i < kVW / 4; ++i) {
        uint32_t w[4];
        ld_nc(w, vp + 8 * i);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[j][4 * i + e] = w[e];
      }
    }
  }
};

}  // namespace attn

}  // namespace futr::device
