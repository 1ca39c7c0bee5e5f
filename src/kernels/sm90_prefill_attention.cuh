// sm90_prefill_attention: causal GQA attention of packed prompt chunks over
// the BF16 KV cache (flash-style: online softmax, nothing of size n x n in
// memory), TMA + WGMMA on Hopper (sm_90a).
//
//   for request r, its new row i (position pos = pos0[r] + i) and query head j
//   (KV head h = j / G), keys t = 0..pos of the request's cache slots:
//     s_t = q . k_t / sqrt(D)
//     out = sum_t softmax(s)_t v_t                      -> BF16
//   The new rows' K/V are in the cache already (the prefill QKV epilogue or
//   the append kernel wrote them), so a chunk attends to its request's prefix
//   (chunked prefill) and to itself with one rule.
//
// Work: items (query head, 128-row tile of one request), the head fastest so
// the G heads of a KV head run side by side and share the K/V blocks in L2;
// the host lists the tiles heaviest first (a tile's cost is the keys it
// reads: pos of its last row). Persistent: one CTA per SM takes items
// blockIdx.x, + gridDim.x, ... (long diagonal tiles early, short ones fill
// the tail), and the producer loads the next item's Q and first K/V blocks
// while the consumers finish the current one, so an item costs no CTA start,
// setup or pipeline fill (what dominated requests of a few hundred rows).
//
// Structure (384 threads):
//   warpgroup 0      producer: one thread issues TMA copies of each item's Q
//                    tile (two buffers) and of its K and V blocks of 128 keys
//                    into a 2-stage ring that runs on across items; gives
//                    registers back (setmaxnreg.dec).
//   warpgroups 1, 2  consumers, 64 query rows each (setmaxnreg.inc):
//     S = Q K^T      m64n128k16 WGMMAs, Q and K from shared memory (K-major,
//                    kernels/ptx/wgmma.cuh contract), S in 64 FP32 registers;
//     softmax        online, in registers: row max over the quad, p =
//                    2^(s log2e/sqrt(D) - m), P rounded to BF16 and the row
//                    sum taken over the rounded values (the weights the MMA
//                    applies), O rescaled when the max moves;
//     O += P V       m64n{D}k16 WGMMAs with P from registers (the accumulator
//                    layout is the A fragment layout) and V read MN-major from
//                    the same [keys][dims] tile (no transpose);
//                    the stage is released once both are retired.
//   Per warpgroup, S of block j + 1 is issued before O += P V of block j, and
//   the softmax of j + 1 runs while the tensor cores work on P V of j (two
//   WGMMA groups in flight; O is rescaled once P V of j has retired).
//   Causal mask on the blocks that reach past the tile's first position.
//
// Shared memory (D = 128): Q 2 x 32 KB, K and V 2 x 32 KB each = 192 KB (D =
// 64: 96 KB); tiles of 128-byte rows (64 dims), 128B-swizzled by TMA: a
// head's D dims are D / 64 panels of [rows][64].
//
// Contract: the cache slots [slot_base[r], slot_base[r] + round_up(pos0[r] +
// n_rows[r], 128)) may be read (slots past the cache's end read as zero;
// paged: the same positions through the block table, whole boxes per block);
// those past position pos0[r] + n_rows[r] - 1 may hold anything (NaN too):
// their scores are replaced by -inf and their V rows zeroed in shared memory
// before the last block's O += P V. Rows of the Q tile past the request's
// rows are computed and not stored.
//
// Limits: D in {64, 128}; any group G (the launcher checks kv_heads x G =
// n_heads). Launcher and tile list: src/launch/prefill_attention.cu. Test:
// tests/kernels/prefill_attention_test.cpp. Benchmark:
// bench/prefill_attention_bench.cpp.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ptx/fence.cuh"
#include "kernels/ptx/mbarrier.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/ptx/tma.cuh"
#include "kernels/ptx/wgmma.cuh"

namespace futr::device {

inline constexpr int kPrefillBM = 128;    // query rows per CTA (two consumer warpgroups of 64)
inline constexpr int kPrefillBN = 128;    // keys per block
inline constexpr int kPrefillStages = 2;  // K/V blocks in flight
inline constexpr int kPrefillThreads = 384;

// One CTA's work: rows [row0, row0 + 128) of request `req` (row0 within the request).
struct PrefillTile {
  int req;
  int row0;
};

struct PrefillAttentionParams {
  const PrefillTile* tiles = nullptr;  // [n_tiles], heaviest first
  const int* row_begin = nullptr;      // [requests] packed index of each request's first row
  const int* n_rows = nullptr;         // [requests] new rows of each request
  const int* pos0 = nullptr;           // [requests] position of the first new row (prefix length)
  const int* slot_base = nullptr;      // [requests] cache slot of position 0
  // Or a paged cache (slot_base unused): [requests] rows of block ids; the
  // K/V tensor maps' box is then one block of rows (the block size, <=
  // kPrefillBN, dividing it), kPrefillBN / block size loads per panel.
  layout::KvBlockTable blocks;
  __nv_bfloat16* out = nullptr;  // [rows] rows of n_heads * D, row stride out_ld
  int64_t out_ld = 0;
  int n_heads = 0;         // query heads
  int n_items = 0;         // tiles x n_heads work items
  int group = 1;           // query heads per KV head
  float scale_log2 = 0.f;  // log2(e) / sqrt(D)
};

template <int D>
struct PrefillSmem {
  static constexpr int kPanels = D / 64;                      // 128-byte panels per row
  static constexpr int kPanelBytes = kPrefillBN * 128;        // one panel of a K or V block (16 KB)
  static constexpr int kQBytes = kPanels * kPrefillBM * 128;  // Q tile
  static constexpr int kKvBytes = kPanels * kPanelBytes;      // one K (or V) block
  static constexpr int kQ = 0;                                // [2] Q tiles (this item's, the next's)
  static constexpr int kK = kQ + 2 * kQBytes;                 // [stages] K blocks
  static constexpr int kV = kK + kPrefillStages * kKvBytes;   // [stages] V blocks
  static constexpr int kBars =
      kV + kPrefillStages * kKvBytes;  // q_full[2], q_empty[2], k_full[S], v_full[S], empty[S]
  static constexpr int kBytes = kBars + 8 * (4 + 3 * kPrefillStages);
  static constexpr int kAlloc = kBytes + 1024;  // + alignment of the dynamic base
};

namespace prefill {

__device__ __forceinline__ uint32_t pack_bf162(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
// ex2.approx.ftz.f32: 2^x in one MUFU op; why: exp2f's subnormal path costs
// extra instructions per call, and weights below 2^-126 do not matter.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace prefill

// The work item `it` (heads fastest: the G heads of a KV head side by side).
struct PrefillItem {
  int head, req, row0, n, pos0, n_keys, n_blocks;
  __device__ __forceinline__ PrefillItem(const PrefillAttentionParams& p, int it) {
    const PrefillTile tile = p.tiles[it / p.n_heads];
    head = it % p.n_heads;
    req = tile.req;
    row0 = tile.row0;
    n = p.n_rows[req];
    pos0 = p.pos0[req];
    n_keys = pos0 + min(row0 + kPrefillBM, n);  // the keys of its last row: pos0 + last row + 1
    n_blocks = (n_keys + kPrefillBN - 1) / kPrefillBN;
  }
};

// qmap: the packed queries [rows][>= n_heads * D] BF16, box [64 rows][64 dims].
// kmap, vmap: one layer's BF16 cache as [num_slots][kv_heads * D], box [128 slots][64 dims].
template <int D>
__global__ void __launch_bounds__(kPrefillThreads, 1)
    sm90_prefill_attention_kernel(const __grid_constant__ CUtensorMap qmap,
                                  const __grid_constant__ CUtensorMap kmap,
                                  const __grid_constant__ CUtensorMap vmap, const PrefillAttentionParams p) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  using L = PrefillSmem<D>;
  constexpr int kPanels = L::kPanels;
  constexpr int kStages = kPrefillStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + L::kBars);  // [2] Q buffers
  uint64_t* q_empty = q_full + 2;                                   // [2]
  uint64_t* k_full = q_empty + 2;                                   // [stages]
  uint64_t* v_full = k_full + kStages;
  uint64_t* empty = v_full + kStages;

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      ptx::mbarrier_init(&q_full[b], 1);
      ptx::mbarrier_init(&q_empty[b], 8);  // the 8 consumer warps
    }
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&k_full[s], 1);
      ptx::mbarrier_init(&v_full[s], 1);
      ptx::mbarrier_init(&empty[s], 8);
    }
    ptx::fence_mbarrier_init_release_cluster();
  }
  __syncthreads();
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();  // the queries and the cache rows come from the kernels before
  const int wg = threadIdx.x / 128;

  if (wg == 0) {  // ---- producer: every item's Q (two buffers) and K/V blocks (the ring) ----
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      ptx::prefetch_tensormap(&qmap);
      ptx::prefetch_tensormap(&kmap);
      ptx::prefetch_tensormap(&vmap);
      int g = 0;  // K/V blocks issued by this CTA so far (the ring's position)
      for (int it = blockIdx.x, k = 0; it < p.n_items; it += gridDim.x, ++k) {
        const PrefillItem w(p, it);
        const int kv_head = w.head / p.group, qb = k % 2;
        ptx::mbarrier_wait_parity(&q_empty[qb], ((k / 2) & 1) ^ 1);
        const int qrow = p.row_begin[w.req] + w.row0;
        ptx::mbarrier_arrive_expect_tx(&q_full[qb], L::kQBytes);
        for (int c = 0; c < kPanels; ++c)
          for (int h = 0; h < 2; ++h)
            ptx::cp_async_bulk_tensor_2d_g2s(
                smem + L::kQ + qb * L::kQBytes + c * kPrefillBM * 128 + h * 64 * 128, &qmap,
                w.head * D + 64 * c, qrow + 64 * h, &q_full[qb]);
        const bool paged = p.blocks.tables != nullptr;
        const int slot0 = paged ? 0 : p.slot_base[w.req];
        for (int j = 0; j < w.n_blocks; ++j, ++g) {
          const int s = g % kStages;
          ptx::mbarrier_wait_parity(&empty[s], ((g / kStages) & 1) ^ 1);
          uint8_t* kd = smem + L::kK + s * L::kKvBytes;
          uint8_t* vd = smem + L::kV + s * L::kKvBytes;
          ptx::mbarrier_arrive_expect_tx(&k_full[s], L::kKvBytes);
          if (!paged) {
            for (int c = 0; c < kPanels; ++c)
              ptx::cp_async_bulk_tensor_2d_g2s(kd + c * L::kPanelBytes, &kmap, kv_head * D + 64 * c,
                                               slot0 + j * kPrefillBN, &k_full[s]);
            ptx::mbarrier_arrive_expect_tx(&v_full[s], L::kKvBytes);
            for (int c = 0; c < kPanels; ++c)
              ptx::cp_async_bulk_tensor_2d_g2s(vd + c * L::kPanelBytes, &vmap, kv_head * D + 64 * c,
                                               slot0 + j * kPrefillBN, &v_full[s]);
          } else {
            // One box per cache block: rows r .. r + block_rows - 1 of the
            // panel at their block's slots (a box of 8-row multiples keeps
            // the 128B swizzle of one box of kPrefillBN rows). A box past
            // the item's keys is not looked up (the table has no entry
            // there): a negative slot, read as zeros, masked like the rest.
            const int block_rows = 1 << p.blocks.shift;
            auto load_blocks = [&](uint8_t* dst, const CUtensorMap* map, uint64_t* bar) {
              for (int r = 0; r < kPrefillBN; r += block_rows) {
                const int key = j * kPrefillBN + r;
                const int slot =
                    key < w.n_keys ? layout::kv_slot(p.blocks, nullptr, w.req, key) : -block_rows;
                for (int c = 0; c < kPanels; ++c)
                  ptx::cp_async_bulk_tensor_2d_g2s(dst + c * L::kPanelBytes + r * 128, map,
                                                   kv_head * D + 64 * c, slot, bar);
              }
            };
            load_blocks(kd, &kmap, &k_full[s]);
            ptx::mbarrier_arrive_expect_tx(&v_full[s], L::kKvBytes);
            load_blocks(vd, &vmap, &v_full[s]);
          }
        }
      }
    }
    return;
  }

  // ---- consumers ------------------------------------------------------------------------
  ptx::setmaxnreg_inc<232>();
  const int cw = wg - 1;  // consumer warpgroup: rows 64 cw .. 64 cw + 63 of a tile
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  const int r_lo = 16 * warp + lane / 4;  // this thread's rows in the warpgroup: r_lo, r_lo + 8
  const float sl2 = p.scale_log2;

  float o[D / 2];
  float m_lo, m_hi, l_lo, l_hi;
  float sc[64];       // S of a block (64 x 128 per warpgroup), then its weights P in place
  uint32_t pa[8][4];  // P as BF16 A fragments of the 8 k16 steps of O += P V
  int g = 0;          // K/V blocks consumed by this CTA so far (the ring's position)

  for (int it = blockIdx.x, k = 0; it < p.n_items; it += gridDim.x, ++k) {
    const PrefillItem w(p, it);
    const int qb = k % 2, n_blocks = w.n_blocks, n_keys = w.n_keys, g0 = g;
    const int pos_lo = w.pos0 + w.row0 + 64 * cw + r_lo;
    const int pos_hi = pos_lo + 8;
    const int first_pos = w.pos0 + w.row0;  // blocks past it need the mask
    const uint8_t* q_wg = smem + L::kQ + qb * L::kQBytes + cw * 64 * 128;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;

    // S = Q K_j^T into sc (issued, not waited for).
    auto issue_s = [&](int j) {
      const int s = (g0 + j) % kStages;
      const uint8_t* kb = smem + L::kK + s * L::kKvBytes;
      ptx::mbarrier_wait_parity(&k_full[s], ((g0 + j) / kStages) & 1);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int c = kk / 4, off = 32 * (kk % 4);
        ptx::wgmma_m64n128k16_f32_bf16(sc, ptx::make_wgmma_desc_sw128(q_wg + c * kPrefillBM * 128 + off),
                                       ptx::make_wgmma_desc_sw128(kb + c * L::kPanelBytes + off), kk > 0);
      }
      ptx::wgmma_commit_group();
    };
    // O += P V_j (issued, not waited for).
    auto issue_pv = [&](int j) {
      const int s = (g0 + j) % kStages;
      ptx::mbarrier_wait_parity(&v_full[s], ((g0 + j) / kStages) & 1);
      uint8_t* vb = smem + L::kV + s * L::kKvBytes;
      if (j == n_blocks - 1 && n_keys % kPrefillBN != 0) {
        // Keys n_keys.. of the last block are no position's (their weights are
        // 0), but their slots may hold anything, and 0 x NaN is NaN: zero those
        // V rows. Both warpgroups read the stage, so both write their half of
        // the rows, then meet before either multiplies.
        const int r0 = n_keys % kPrefillBN, chunks = (kPrefillBN - r0) * 8 * kPanels;  // 16-byte chunks
        for (int i = threadIdx.x - 128; i < chunks; i += 256) {
          const int c = i / ((kPrefillBN - r0) * 8), rest = i % ((kPrefillBN - r0) * 8);
          *reinterpret_cast<uint4*>(vb + c * L::kPanelBytes + (r0 + rest / 8) * 128 + 16 * (rest % 8)) =
              make_uint4(0, 0, 0, 0);
        }
        ptx::fence_proxy_async_shared_cta();
        ptx::bar_sync(1, 256);
      }
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const uint64_t dv = ptx::make_wgmma_desc_sw128_mn(vb + kk * 2 * 1024, L::kPanelBytes);
        if constexpr (D == 128) ptx::wgmma_m64n128k16_f32_bf16_rs_tb(o, pa[kk], dv, 1);
        else ptx::wgmma_m64n64k16_f32_bf16_rs_tb(o, pa[kk], dv, 1);
      }
      ptx::wgmma_commit_group();
    };
    // The online softmax of block j over sc (rows r_lo: sc[4i], sc[4i+1]; r_hi:
    // sc[4i+2], sc[4i+3]): masked, scaled, the new row maxima, sc replaced by the
    // weights rounded to BF16 (the values the MMA applies), their row sums
    // (this thread's columns; the quad's are added at the end) into l, and the
    // factors c that O must be scaled by once the previous P V has retired.
    auto softmax = [&](int j, float& c_lo, float& c_hi) {
      const int key0 = j * kPrefillBN + 2 * (lane % 4);
      const bool masked = j * kPrefillBN + kPrefillBN - 1 > first_pos;
      float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + 8 * i + e;
          float a = sc[4 * i + e] * sl2, b = sc[4 * i + 2 + e] * sl2;
          if (masked) {
            a = key <= pos_lo ? a : -INFINITY;
            b = key <= pos_hi ? b : -INFINITY;
          }
          sc[4 * i + e] = a;
          sc[4 * i + 2 + e] = b;
          mx_lo = fmaxf(mx_lo, a);
          mx_hi = fmaxf(mx_hi, b);
        }
      }
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
      // Key 0 is visible to every row, so after block 0 the maxima are finite.
      c_lo = prefill::exp2_approx(m_lo - mx_lo);
      c_hi = prefill::exp2_approx(m_hi - mx_hi);
      m_lo = mx_lo;
      m_hi = mx_hi;
      float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t plo = prefill::pack_bf162(prefill::exp2_approx(sc[4 * i] - mx_lo),
                                                 prefill::exp2_approx(sc[4 * i + 1] - mx_lo));
        const uint32_t phi = prefill::pack_bf162(prefill::exp2_approx(sc[4 * i + 2] - mx_hi),
                                                 prefill::exp2_approx(sc[4 * i + 3] - mx_hi));
        sc[4 * i] = prefill::bf16_lo(plo), sc[4 * i + 1] = prefill::bf16_hi(plo);
        sc[4 * i + 2] = prefill::bf16_lo(phi), sc[4 * i + 3] = prefill::bf16_hi(phi);
        sum_lo += sc[4 * i] + sc[4 * i + 1];
        sum_hi += sc[4 * i + 2] + sc[4 * i + 3];
      }
      l_lo = l_lo * c_lo + sum_lo;
      l_hi = l_hi * c_hi + sum_hi;
    };
    // sc's weights (exact BF16 values) as the A fragments: column blocks 2kk
    // (a[0], a[1]) and 2kk + 1 (a[2], a[3]) of k16 step kk.
    auto pack_p = [&] {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 2 * kk + h;
          pa[kk][2 * h] = prefill::pack_bf162(sc[4 * i], sc[4 * i + 1]);
          pa[kk][2 * h + 1] = prefill::pack_bf162(sc[4 * i + 2], sc[4 * i + 3]);
        }
    };

    // The pipeline (per warpgroup): S of block j + 1 is issued before P V of
    // block j, so the softmax of j + 1 runs while the tensor cores do P V of j;
    // O is rescaled and P repacked only once that P V has retired. The last
    // block is peeled: with the S issue conditional inside the loop ptxas
    // serializes the WGMMAs (C7514).
    ptx::mbarrier_wait_parity(&q_full[qb], (k / 2) & 1);
    float c_lo, c_hi;
    issue_s(0);
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(sc);
    softmax(0, c_lo, c_hi);  // O = 0: nothing to rescale
    pack_p();
    for (int j = 0; j + 1 < n_blocks; ++j) {
      issue_s(j + 1);
      issue_pv(j);
      ptx::wgmma_wait_group<1>();  // S of j + 1 (the older group) has retired
      ptx::fence_operands(sc);
      softmax(j + 1, c_lo, c_hi);
      ptx::wgmma_wait_group<0>();  // P V of j has retired: its stage is free
      ptx::fence_operands(o);
      if (lane == 0) ptx::mbarrier_arrive(&empty[(g0 + j) % kStages]);
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[4 * i] *= c_lo;
        o[4 * i + 1] *= c_lo;
        o[4 * i + 2] *= c_hi;
        o[4 * i + 3] *= c_hi;
      }
      pack_p();
    }
    issue_pv(n_blocks - 1);
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(o);
    if (lane == 0) {
      ptx::mbarrier_arrive(&empty[(g0 + n_blocks - 1) % kStages]);  // the next item's blocks come through it
      ptx::mbarrier_arrive(&q_empty[qb]);                           // Q's last reader (S) has retired
    }
    g += n_blocks;

    // ---- epilogue: normalize, store the rows of this request -------------------------
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    const float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
    const int row_lo = w.row0 + 64 * cw + r_lo;  // within the request
    const int64_t base = p.row_begin[w.req];
    __nv_bfloat16* out_lo = p.out + (base + row_lo) * p.out_ld + w.head * D + 2 * (lane % 4);
    __nv_bfloat16* out_hi = out_lo + 8 * p.out_ld;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      if (row_lo < w.n)
        *reinterpret_cast<uint32_t*>(out_lo + 8 * i) =
            prefill::pack_bf162(o[4 * i] * inv_lo, o[4 * i + 1] * inv_lo);
      if (row_lo + 8 < w.n)
        *reinterpret_cast<uint32_t*>(out_hi + 8 * i) =
            prefill::pack_bf162(o[4 * i + 2] * inv_hi, o[4 * i + 3] * inv_hi);
    }
  }
}

}  // namespace futr::device
