// QKV projection epilogue: RoPE on q and k (fragment pass) and direct writes of
// q to its output and of k, v into their BF16 KV-cache slots (piece pass).
//
// Columns of C (N = (heads + 2 kv_heads) * D, D = head_dim in {64, 128}):
//   [0, heads*D)                     q, head h at columns h*D .. h*D + D-1
//   [heads*D, (heads+kv_heads)*D)    k
//   [(heads+kv_heads)*D, N)          v
// RoPE (Hugging Face rotate-half pairing: dim i with dim i + D/2), for q and k:
//   a = pos * inv_freq[i] (FP32 product, i < D/2)
//   x'[i]       = x[i] cos a - x[i + D/2] sin a
//   x'[i + D/2] = x[i + D/2] cos a + x[i] sin a
// inv_freq is a table (theta and llama3 scaling applied on the host). In the
// WGMMA fragment, columns d and d + D/2 of a row sit in the same thread (8-col
// blocks j and j + D/16), so the rotation needs no data exchange; the tile
// width BN is a multiple of D and tiles start on head boundaries.
//
// Rows -> (position, cache slot) come from a row map (RowMap template):
//   PackedRows  variable-length requests concatenated without padding; a
//               prefix sum cu_rows gives each row its request b (binary search),
//               pos = start_pos[b] + (row - cu_rows[b]), slot = slot_base[b] + pos.
//   PaddedRows  R requests padded to max_len rows each (M = R * max_len):
//               b = row / max_len, i = row % max_len, pos = start_pos[b] + i;
//               rows with i >= lengths[b] are padding: q is written (attention
//               masks it), K/V are not.
// KV cache (docs/LAYOUTS.md): k_cache/v_cache[num_slots][kv_heads][D] BF16; a
// row whose slot lies outside [0, num_slots) writes no K/V.
// CPU reference: src/reference/fp8_gemm_ref.h (rope_rotate, qkv_rope_row, row maps).
#pragma once

#include "kernels/epilogue/epilogue.cuh"

namespace futr::device::epi {

struct RowInfo {
  int pos;   // RoPE position of the row
  int slot;  // KV-cache slot (-1: padding row, write no K/V)
};

// Row maps. lookup() reads the request table from global memory (any R);
// for R <= 32 the table is cached once per kernel in registers, lane b holding
// request b (load_lane), and lookup_warp() resolves rows with shuffles only.
// NOTE: the global binary search (3-6 dependent loads per row) on the
// epilogue's critical path cost several microseconds per tile.
inline constexpr int kWarpCachedRequests = 32;

struct PackedRows {
  struct Args {
    const int* cu_rows;    // [R+1] request b owns rows [cu_rows[b], cu_rows[b+1]); cu_rows[0] = 0
    const int* start_pos;  // [R] position of request b's first row (its cached prefix length)
    const int* slot_base;  // [R] cache slot of request b's position 0 (slots contiguous per request)
    int num_requests;      // R >= 1
  };
  __device__ __forceinline__ static RowInfo lookup(const Args& a, int row) {
    int lo = 0, hi = a.num_requests - 1;  // largest b with cu_rows[b] <= row
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (__ldg(a.cu_rows + mid) <= row) lo = mid;
      else hi = mid - 1;
    }
    const int pos = __ldg(a.start_pos + lo) + row - __ldg(a.cu_rows + lo);
    return {pos, __ldg(a.slot_base + lo) + pos};
  }
  // lane b: (cu_rows[b], start_pos[b], slot_base[b]); lanes >= R: cu = INT_MAX.
  __device__ __forceinline__ static void load_lane(const Args& a, int lane, int (&q)[3]) {
    const bool in = lane < a.num_requests;
    q[0] = in ? __ldg(a.cu_rows + lane) : 0x7fffffff;
    q[1] = in ? __ldg(a.start_pos + lane) : 0;
    q[2] = in ? __ldg(a.slot_base + lane) : 0;
  }
  // All 32 lanes call this (each with its own rows). Request of a row = number
  // of requests starting at or before it, minus one.
  template <int NR>
  __device__ __forceinline__ static void lookup_warp(const Args&, const int (&q)[3], const int (&rows)[NR],
                                                     RowInfo (&out)[NR]) {
    int cnt[NR] = {};
#pragma unroll 4
    for (int b = 0; b < kWarpCachedRequests; ++b) {
      const int cu = __shfl_sync(0xffffffffu, q[0], b);
#pragma unroll
      for (int i = 0; i < NR; ++i) cnt[i] += cu <= rows[i];
    }
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int b = max(cnt[i] - 1, 0);
      const int cu = __shfl_sync(0xffffffffu, q[0], b);
      const int pos = __shfl_sync(0xffffffffu, q[1], b) + rows[i] - cu;
      out[i] = {pos, __shfl_sync(0xffffffffu, q[2], b) + pos};
    }
  }
};

struct PaddedRows {
  struct Args {
    const int* lengths;    // [R] valid rows of request b (<= max_len)
    const int* start_pos;  // [R] position of request b's first row
    const int* slot_base;  // [R] cache slot of request b's position 0
    int num_requests;      // R (M = R * max_len)
    int max_len;           // padded rows per request
  };
  __device__ __forceinline__ static RowInfo lookup(const Args& a, int row) {
    const int b = row / a.max_len, i = row - b * a.max_len;
    const int pos = __ldg(a.start_pos + b) + i;
    return {pos, i < __ldg(a.lengths + b) ? __ldg(a.slot_base + b) + pos : -1};
  }
  __device__ __forceinline__ static void load_lane(const Args& a, int lane, int (&q)[3]) {
    const bool in = lane < a.num_requests;
    q[0] = in ? __ldg(a.lengths + lane) : 0;
    q[1] = in ? __ldg(a.start_pos + lane) : 0;
    q[2] = in ? __ldg(a.slot_base + lane) : 0;
  }
  template <int NR>
  __device__ __forceinline__ static void lookup_warp(const Args& a, const int (&q)[3], const int (&rows)[NR],
                                                     RowInfo (&out)[NR]) {
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int b = min(rows[i] / a.max_len, kWarpCachedRequests - 1), r = rows[i] - b * a.max_len;
      const int len = __shfl_sync(0xffffffffu, q[0], b);
      const int pos = __shfl_sync(0xffffffffu, q[1], b) + r;
      const int sb = __shfl_sync(0xffffffffu, q[2], b);
      out[i] = {pos, r < len ? sb + pos : -1};
    }
  }
};

// sin/cos of an FP32 angle (up to ~1e6 rad): reduce modulo 2 pi in double
// (exact enough: k < 2^20, 2 pi carries 53 bits), then the SFU on [-pi, pi]
// (absolute error ~2^-21). NOTE: sincosf() would pull in a local-memory
// Payne-Hanek slow path for the large angles that long positions produce.
__device__ __forceinline__ void sincos_angle(float angle, float& s, float& c) {
  const double a = angle;
  const double k = rint(a * 0.15915494309189535);  // 1 / (2 pi)
  const float r = float(fma(-k, 6.283185307179586, a));
  __sincosf(r, &s, &c);
}

template <class RowMap>
struct QkvRopeKvCache : OpBase {
  struct Params {
    typename RowMap::Args rows;  // row -> (position, slot)
    const float* inv_freq;       // [head_dim / 2] RoPE inverse frequencies
    int heads;                   // query heads
    int kv_heads;                // key/value heads
    int head_dim;                // D: 64 or 128
    uint16_t* q_out;             // [M, ld_q] BF16 rotated q
    int ld_q;                    // q row stride, elements (>= heads * D)
    uint16_t* k_cache;           // [num_slots, kv_heads, D] BF16 rotated k
    uint16_t* v_cache;           // [num_slots, kv_heads, D] BF16 v
    int num_slots;               // cache capacity (slots)
  };

  template <class P>
  __device__ __forceinline__ static void begin(const P& pp, const TileCtx&, EpiState& st) {
    const Params& p = pp;
    if (p.rows.num_requests <= kWarpCachedRequests) RowMap::load_lane(p.rows, threadIdx.x % 32, st.req);
  }

  // Positions of the two fragment rows and slots of the four piece rows.
  template <class P>
  __device__ __forceinline__ static void tile_begin(const P& pp, const TileCtx& t, EpiState& st) {
    const Params& p = pp;
    int rows[6];
#pragma unroll
    for (int i = 0; i < 6; ++i) {
      const int r = i < 2 ? st.frow[i] : st.prow[i - 2];
      rows[i] = r < t.M ? r : 0;  // rows past M: any valid row (results unused)
    }
    RowInfo info[6];
    if (p.rows.num_requests <= kWarpCachedRequests) {
      RowMap::lookup_warp(p.rows, st.req, rows, info);
    } else {
#pragma unroll
      for (int i = 0; i < 6; ++i) info[i] = RowMap::lookup(p.rows, rows[i]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) st.frag_pos[h] = info[h].pos;
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      const int slot = st.prow[it] < t.M ? info[2 + it].slot : -1;
      st.slot[it] = (slot >= 0 && slot < p.num_slots) ? slot : -1;
    }
  }

  template <int NREG>
  __device__ __forceinline__ static void fragment(const Params& p, const TileCtx& t, const FragCoord& f,
                                                  float (&acc)[NREG], EpiState& st) {
    if (p.head_dim == 128) rope<128>(p, t, f, acc, st);
    else rope<64>(p, t, f, acc, st);
  }

  __device__ __forceinline__ static void piece(const Params& p, const TileCtx&, int, int it, int row, int col,
                                               float (&v)[4], EpiState& st) {
    uint2 o;
    o.x = pack_bf16x2(v[0], v[1]);
    o.y = pack_bf16x2(v[2], v[3]);
    const int q_cols = p.heads * p.head_dim, kv_cols = p.kv_heads * p.head_dim;
    uint16_t* dst;
    if (col < q_cols) {
      dst = p.q_out + size_t(row) * p.ld_q + col;
    } else {
      const int slot = st.slot[it];
      if (slot < 0) return;
      const int c = col - q_cols;
      dst = c < kv_cols ? p.k_cache + size_t(slot) * kv_cols + c
                        : p.v_cache + size_t(slot) * kv_cols + (c - kv_cols);
    }
    *reinterpret_cast<uint2*>(dst) = o;
  }

 private:
  template <int D, int NREG>
  __device__ __forceinline__ static void rope(const Params& p, const TileCtx& t, const FragCoord& f,
                                              float (&acc)[NREG], const EpiState& st) {
    constexpr int kBlocks = NREG / 4;  // 8-column blocks in the tile
    constexpr int kHeadBlocks = D / 8;
    constexpr int kHalf = D / 16;  // blocks per half head: partner of block j is j + kHalf
    static_assert(kBlocks % kHeadBlocks == 0, "tile width must be a multiple of head_dim");
    const int qk_end = (p.heads + p.kv_heads) * D;
#pragma unroll
    for (int jj = 0; jj < kHalf; ++jj) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float fr = __ldg(p.inv_freq + 8 * jj + f.col0 + e);
        float c[2], s[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) sincos_angle(float(st.frag_pos[h]) * fr, s[h], c[h]);
#pragma unroll
        for (int hd = 0; hd < kBlocks / kHeadBlocks; ++hd) {
          const int head_col = t.n0 + hd * D;
          if (head_col >= qk_end || head_col >= t.N) continue;  // v head or past N: no rotation
          const int j1 = hd * kHeadBlocks + jj, j2 = j1 + kHalf;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float a = acc[4 * j1 + 2 * h + e], b = acc[4 * j2 + 2 * h + e];
            acc[4 * j1 + 2 * h + e] = a * c[h] - b * s[h];
            acc[4 * j2 + 2 * h + e] = b * c[h] + a * s[h];
          }
        }
      }
    }
  }
};

}  // namespace futr::device::epi
