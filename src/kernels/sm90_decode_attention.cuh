// sm90_decode_attention: one decode step of attention for a batch of sequences,
// over the BF16 primary cache or the INT4 mirror (rotated or not), split over
// the context (FlashDecoding): each CTA reduces one chunk of one sequence for
// the G query heads of one KV head to (m, l, O); with one chunk it finalizes
// the output, with several the last CTA of (sequence, KV head) to finish
// merges the chunks' partial results (an arrival counter; no second launch).
//
//   for query head j of sequence b (KV head h = j / G), tokens t < len[b]:
//     q' = q H (rotated mirror; H block Walsh-Hadamard), else q
//     s_t = q' . k_t / sqrt(D)              k_t = (n - 8) * s^K_t (mirror) or BF16
//     o   = sum_t softmax(s)_t v_t          v_t = (n - 8) * s^V_t (mirror) or BF16
//     out = o H (rotated mirror) else o     -> BF16
//
// Operand roles ("swap AB", mma.sync.m16n8k16, FP32 accumulation):
//   S^T[16 tokens x 8 heads] = K[16 x D] Q^T[D x 8]: K is the A operand, so two
//     8-slot tiles of the mirror's fragment-ordered keys are A fragments as
//     loaded (kernels/layout/kv_cache.cuh gives the k permutation the query
//     follows); the G <= 8 query heads are the n = 8 columns (no 16-row padding).
//   O^T[D x 8 heads] = V^T[D x 16 tokens] P^T[16 tokens x 8]: P^T is the
//     scores' fragment transposed by movmatrix (no shared memory); V^T rows
//     are permuted so a lane's V bytes are contiguous: lane row g of m-tile mt
//     is dim g * D/8 + 2mt (row g + 8: + 1), i.e. both nibbles of byte
//     g * D/16 + mt of a token's row, paired across tokens 2c, 2c+1 by prmt.
//   The mirror's V scale of token t multiplies p_t before the FP16 cast; the K
//   scale multiplies the score. Mirror operands are FP16 (n - 8 exact); the
//   BF16 cache uses BF16 operands (the query rounded to BF16, as the CPU's
//   bf16 storage does), P in BF16 (kAttnSplitP: as two BF16 halves, hi + lo).
//
// Work split: grid (ceil(splits / chunks_per_cta), kv_heads, batch); a
// sequence's iterations (two 16-token steps for the mirror, one for BF16) are
// cut into `splits` equal chunks; a CTA reduces chunks_per_cta consecutive
// chunks in turn, each to its own partial (m, l, O): warp w takes iterations
// w, w + 4, ... of the chunk with its own online softmax and the 4 warps merge
// in shared memory. A chunk's partial is the same bits whichever CTA reduces
// it, so the output depends on `splits` only, never on chunks_per_cta (batch
// invariance: the launcher picks chunks_per_cta by the batch, the split count
// by the sequence length). The mirror's bytes come through a cp.async ring,
// the next iteration's in flight, and the next chunk's first iteration in
// flight while a chunk's warps merge (their O rows in the ring's free half).
//
// Contract (paged: the same positions through the block table, whole
// 16-slot steps per block): slots [slot_base[b], slot_base[b] + round_up(len[b], 16)) are
// readable (kernels/layout/kv_cache.cuh); tokens >= len are masked (their K
// scores -inf, their V weights 0, BF16 V zeroed), whatever the slots hold.
// len 0 gives a zero output.
//
// Limits: D in {64, 128}; G <= 8. Launcher (variant list, split heuristic):
// src/launch/decode_attention.cu. Test: tests/kernels/decode_attention_test.cpp.
// Benchmark: bench/decode_attention_bench.cpp.
// Work unit: decode_attention_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit. The per-step loads and MMAs of each cache
// format: sm90_decode_attention_step.cuh.
#pragma once

#include "kernels/ptx/cp_async.cuh"
#include "kernels/ptx/mma.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/sm90_decode_attention_step.cuh"
#include "kernels/sm90_kv_common.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

inline constexpr int kAttnMaxSplits = 512;  // the merge keeps G x splits weights in shared memory

struct DecodeAttentionParams {
  const __nv_bfloat16* q = nullptr;  // [batch] rows of n_heads * D, row stride q_ld
  int64_t q_ld = 0;
  __nv_bfloat16* out = nullptr;    // [batch][n_heads][D] (splits == 1)
  const int* slot_base = nullptr;  // [batch] first slot of each sequence
  layout::KvBlockTable blocks;     // or a paged cache's block tables, [batch] rows (slot_base unused)
  const int* kv_len = nullptr;     // [batch] tokens to attend (the new one included)
  KvLayerPtrs cache;
  int kv_heads = 0, group = 1;  // n_heads = kv_heads * group
  float scale_log2 = 0.f;       // log2(e) / sqrt(D)
  int rot_block = 0;            // mirror rotated with this Hadamard block (0: none)
  int splits = 1;               // context chunks per (sequence, KV head)
  int chunks_per_cta = 1;       // chunks one CTA reduces in turn (grid.x = ceil(splits / this))
  float* o_part = nullptr;      // [batch][n_heads][splits][D] unnormalized (splits > 1)
  float* ml_part = nullptr;     // [batch][n_heads][splits][2] (running max m, sum l)
  int* counters = nullptr;      // [batch][kv_heads] arrivals (splits > 1); zero before the
                                // first launch, left zero by every launch
};

// Shared memory of one unit, as a view of its pieces (work_unit.h). The INT4
// ring (main loop; each warp's O rows for the merge in its ring's second
// half), the BF16 path's O rows and the split merge's weights (epilogue)
// share one buffer (raw).
template <int D, KvKind KIND>
struct DecodeAttentionSmem {
  static constexpr bool kInt4 = KIND == KvKind::kInt4;
  static constexpr int kRingBytes =
      kInt4 ? kAttnWarps * kAttnStages * attn::Step<D, KvKind::kInt4>::kStageBytes : 0;
  static constexpr int kOBytes = kAttnWarps * 8 * (D + 4) * 4;
  static constexpr int kWBytes = 8 * kAttnMaxSplits * 4;  // the split merge's weights [G][splits]
  static constexpr int kRawBytes = kRingBytes > kOBytes ? (kRingBytes > kWBytes ? kRingBytes : kWBytes)
                                                        : (kOBytes > kWBytes ? kOBytes : kWBytes);
  float (*q)[D + 4];  // [8][D + 4] the group's query rows (FP32; rotated)
  uint8_t* raw;       // [kRawBytes], 16-byte aligned
  float (*m)[8];      // [kAttnWarps][8] the warps' running max
  float (*l)[8];      // [kAttnWarps][8] and sum
  float* lsum;        // [8] the split merge's sums per head
  int* is_last;       // this unit is the last of its (sequence, KV head)
  // Its bytes (the static declarations of the kernel below, unpadded).
  static constexpr size_t kBytes = 8 * (D + 4) * 4 + kRawBytes + 2 * kAttnWarps * 8 * 4 + 8 * 4 + 4;
};

// The unit count of a launch (work_unit.h): chunk groups x KV heads x sequences.
__host__ __device__ __forceinline__ int decode_attention_grid_x(const DecodeAttentionParams& p) {
  return (p.splits + p.chunks_per_cta - 1) / p.chunks_per_cta;
}

// One unit (work_unit.h): chunk group `split` = unit.x() of KV head unit.y()
// of sequence unit.z() (linear: x + grid_x * (y + kv_heads * z)); kAttnWarps * 32 threads.
template <int D, KvKind KIND, class Unit, class Deps>
__device__ __forceinline__ void decode_attention_unit(const DecodeAttentionParams& p, const Unit& unit,
                                                      int /*units*/, const DecodeAttentionSmem<D, KIND>& sm,
                                                      const Deps& deps) {
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  deps.wait();     // q, the cache and the row map come from earlier ops

  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  constexpr int kSteps = D / 16;  // mma k-steps of Q K^T, m-tiles of V^T P^T
  constexpr int kThreads = kAttnWarps * 32;
  constexpr bool kInt4 = KIND == KvKind::kInt4;
  using StepT = attn::Step<D, KIND>;
  constexpr int kU = kInt4 ? 2 : 1;  // 16-token steps per iteration (one softmax update)

  // ---- shared memory ----------------------------------------------------------
  float(*const q_s)[D + 4] = sm.q;
  uint8_t* const smem_raw = sm.raw;
  float(*const m_s)[8] = sm.m;
  float(*const l_s)[8] = sm.l;
  // The warps' O rows for the merge, [head][D] per warp. INT4: in the second
  // half of each warp's own ring (the stages a chunk's first iteration does
  // not fill), so the next chunk's first loads are in flight during the merge;
  // BF16 (no ring): packed at the buffer's start.
  constexpr int kStageB = kInt4 ? attn::Step<D, KvKind::kInt4>::kStageBytes : 0;
  constexpr int kOStride = kInt4 ? kAttnStages * kStageB : 8 * (D + 4) * 4;
  constexpr int kOOffset = (kAttnStages - kU) * kStageB;
  static_assert(!kInt4 || kU * kStageB >= 8 * (D + 4) * 4, "a warp's O rows fit in the stages left free");
  auto o_s = [&](int w) { return reinterpret_cast<float(*)[D + 4]>(smem_raw + w * kOStride + kOOffset); };

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int split = unit.x(), head = unit.y(), b = unit.z();
  const int G = p.group, n_heads = p.kv_heads * G;
  const bool paged = p.blocks.tables != nullptr;
  const int len = p.kv_len[b], base = paged ? 0 : p.slot_base[b];
  // The slot of a 16-token step's first token: contiguous from base, or its
  // block's (a block holds whole steps: docs/LAYOUTS.md).
  auto step_slot = [&](int step) {
    return paged ? layout::kv_slot(p.blocks, p.slot_base, b, 16 * step) : base + 16 * step;
  };
  // Work split in iterations of kU 16-token steps (the mirror: two steps per
  // softmax update): a sequence's iterations are cut into `splits` chunks,
  // warp w of a CTA takes iterations w, w + 4, ... of its chunk.
  const int steps = (len + 15) / 16;
  const int units = (steps + kU - 1) / kU;
  // Chunks of at least 64 keys (a function of the sequence's own length: a
  // short sequence in a long-context launch leaves its last chunks empty
  // rather than spreading a few keys over many CTAs).
  constexpr int kMinUnits = 64 / (16 * kU);
  const int per = max((units + p.splits - 1) / p.splits, kMinUnits);
  // Chunks holding keys (the rest are empty: with splits > 1 the combine
  // skips them, so a CTA whose chunks are all empty only arrives).
  const int n_chunks = min(p.splits, (units + per - 1) / per);
  const int chunk_end = p.splits > 1 ? min(n_chunks, (split + 1) * p.chunks_per_cta) : 1;
  int chunk = split * p.chunks_per_cta;  // the chunk being reduced
  int first = 0, n_mine = 0;             // this warp's first iteration in it, and how many
  auto enter_chunk = [&] {
    const int u_begin = chunk * per, u_end = min(units, u_begin + per);
    first = u_begin + warp;
    n_mine = first < u_end ? (u_end - first + kAttnWarps - 1) / kAttnWarps : 0;
  };
  enter_chunk();
  // The 16-token step of iteration i, sub-step u: global step index and its
  // slot offset from the warp's first step.
  auto step_of = [&](int i, int u) { return kU * (first + i * kAttnWarps) + u; };
  auto rel_of = [&](int i, int u) { return 16 * (kU * kAttnWarps * i + u); };

  // ---- the first steps' cache bytes in flight before the query prologue ----------
  // NOTE: the mirror's step is 80 bytes per lane, too few to cover the memory
  // latency one step ahead: a per-warp cp.async ring holds kAttnStages steps,
  // the next iteration's in flight while the current one is computed (~75 KB
  // per SM at 16 warps: at least 32 KB keeps the HBM pipe full). The BF16 step is 384
  // bytes per lane, loaded straight into registers (occupancy hides it).
  static_assert(kAttnStages % 2 == 0, "whole iterations of two steps per ring slot pair");
  constexpr int kGroupsAhead = kAttnStages / kU - 1;  // iterations in flight beyond the current one
  uint8_t* ring = smem_raw + (kInt4 ? warp * kAttnStages * attn::Step<D, KvKind::kInt4>::kStageBytes : 0);
  auto stage = [&](int i, int u) {
    return ring + ((kU * i + u) % kAttnStages) * attn::Step<D, KvKind::kInt4>::kStageBytes;
  };
  typename attn::Step<D, KvKind::kInt4>::Cursor cursor{};
  auto issue_iter = [&](int i) {  // the steps of iteration i that exist
    if (i < n_mine)
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (step_of(i, u) < steps)
          attn::Step<D, KvKind::kInt4>::issue(stage(i, u), cursor,
                                              paged ? step_slot(step_of(i, u)) : rel_of(i, u), lane);
    ptx::cp_async_commit();
  };
  auto prefetch_chunk = [&] {  // the chunk's first iterations in flight
    if constexpr (kInt4) {
      // Paged: the cursor at slot 0 and each step at its absolute slot (every
      // offset is linear in the slot: the same addresses as contiguous).
      cursor = attn::Step<D, KvKind::kInt4>::cursor(p.cache, p.kv_heads, head,
                                                    paged ? 0 : base + 16 * kU * first, lane);
#pragma unroll
      for (int i = 0; i < kGroupsAhead; ++i) issue_iter(i);
    }
  };
  prefetch_chunk();
  // ---- the query: G rows, rotated into attention space -------------------------
  for (int i = tid; i < 8 * D; i += kThreads) {
    const int r = i / D, d = i % D;
    q_s[r][d] = r < G ? __bfloat162float(p.q[size_t(b) * p.q_ld + (size_t(head) * G + r) * D + d]) : 0.f;
  }
  __syncthreads();
  if (kInt4 && p.rot_block > 0)
    hadamard_rows_smem(&q_s[0][0], G, D + 4, D, p.rot_block, tid, kThreads, [] { __syncthreads(); });
  // B operand (Q^T, 16 dims x 8 heads) per k-step: head g, columns (2c, 2c+1), (2c+8, 2c+9).
  uint32_t qb[kSteps][2];
#pragma unroll
  for (int m = 0; m < kSteps; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int c0 = 8 * r + 2 * c;
      if constexpr (kInt4) {
        const float f = r ? 0.0625f : 1.f;  // columns 8..15 meet 16 (n - 8) (int4x8_to_half2_hi16)
        qb[m][r] = attn::pack_half2(f * q_s[g][layout::kv_int4_query_dim(m, c0)],
                                    f * q_s[g][layout::kv_int4_query_dim(m, c0 + 1)]);
      } else {
        qb[m][r] =
            attn::pack_bf162(q_s[g][attn::bf16_query_dim(m, c0)], q_s[g][attn::bf16_query_dim(m, c0 + 1)]);
      }
    }

  while (chunk < chunk_end) {  // the CTA's chunks in turn (one at small batch)
    // ---- main loop: online softmax over this warp's steps --------------------------
    float o[kSteps][4];  // O^T m-tile mt: [dim row g | g+8][heads 2c, 2c+1]
#pragma unroll
    for (int mt = 0; mt < kSteps; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][e] = 0.f;
    float mrun[2] = {-INFINITY, -INFINITY}, lrun[2] = {0.f, 0.f};  // heads 2c, 2c+1

    for (int i = 0; i < n_mine; ++i) {
      StepT cur[kU];
      if constexpr (kInt4) {
        __syncwarp();                        // every lane is done reading iteration i - 1's stages
        issue_iter(i + kGroupsAhead);        // ... which this refills
        ptx::cp_async_wait<kGroupsAhead>();  // this lane's copies of iteration i have landed
        __syncwarp();                        // ... and every other lane's
#pragma unroll
        for (int u = 0; u < kU; ++u) cur[u].read(stage(i, u), lane);
      } else {
        cur[0].load(p.cache, p.kv_heads, head, step_slot(step_of(i, 0)), lane);
      }

      // S^T = K Q^T (16 tokens x 8 heads) per sub-step.
      // acc[0], acc[1]: token g, heads 2c, 2c+1; acc[2], acc[3]: token g + 8.
      float sc[kU][4];
      bool valid[kU][2];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int t0 = 16 * step_of(i, u);
        valid[u][0] = t0 + g < len;
        valid[u][1] = t0 + 8 + g < len;
        // NOTE: two accumulators (even and odd k-steps) halve the chain of
        // dependent MMAs (each waits for the previous one's result).
        float acc2[2][4] = {};
        if constexpr (kInt4) {
#pragma unroll
          for (int w = 0; w < kSteps / 2; ++w) {
            uint32_t r0[4], r1[4];  // r[1], r[3] are 16 (n - 8): the query's columns 8..15 carry 1/16
            layout::int4x8_to_half2_hi16(cur[u].k[0][w], r0);
            layout::int4x8_to_half2_hi16(cur[u].k[1][w], r1);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint32_t a[4] = {r0[2 * h], r1[2 * h], r0[2 * h + 1], r1[2 * h + 1]};
              ptx::mma_m16n8k16_f16(acc2[h], a, qb[2 * w + h]);
            }
          }
        } else {
#pragma unroll
          for (int m = 0; m < kSteps; ++m) {
            const int w = m / 2, h = m % 2;
            const uint32_t a[4] = {cur[u].k[0][4 * w + 2 * h], cur[u].k[1][4 * w + 2 * h],
                                   cur[u].k[0][4 * w + 2 * h + 1], cur[u].k[1][4 * w + 2 * h + 1]};
            ptx::mma_m16n8k16_bf16(acc2[h], a, qb[m]);
          }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = e / 2;
          float f = p.scale_log2;
          if constexpr (kInt4) f *= cur[u].ks[t];
          sc[u][e] = valid[u][t] ? (acc2[0][e] + acc2[1][e]) * f : -INFINITY;
        }
      }

      // Online softmax, once per iteration: heads 2c (j = 0) and 2c + 1 (j = 1).
      float alpha[2], mref[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < kU; ++u) mx = fmaxf(mx, fmaxf(sc[u][j], sc[u][2 + j]));
#pragma unroll
        for (int off = 4; off < 32; off *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float mnew = fmaxf(mrun[j], mx);
        mref[j] = mnew == -INFINITY ? 0.f : mnew;
        alpha[j] = attn::exp2_approx(mrun[j] - mref[j]);
        mrun[j] = mnew;
      }
      float pr[kU][4];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) pr[u][e] = attn::exp2_approx(sc[u][e] - mref[e % 2]);
      lrun[0] *= alpha[0];
      lrun[1] *= alpha[1];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        lrun[0] += pr[u][0] + pr[u][2];
        lrun[1] += pr[u][1] + pr[u][3];
      }
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))  // the max moved
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          o[mt][0] *= alpha[0];
          o[mt][1] *= alpha[1];
          o[mt][2] *= alpha[0];
          o[mt][3] *= alpha[1];
        }

#pragma unroll
      for (int u = 0; u < kU; ++u) {
        // P^T as the B operand: rows (token g | g+8) x heads (2c, 2c+1), transposed.
        uint32_t pb[2], pl[2];  // pl: the BF16 path's low halves (kAttnSplitP)
        if constexpr (kInt4) {
          const float w0 = valid[u][0] ? cur[u].vs[0] : 0.f, w1 = valid[u][1] ? cur[u].vs[1] : 0.f;
          pb[0] = ptx::movmatrix_trans(attn::pack_half2(pr[u][0] * w0, pr[u][1] * w0));
          pb[1] = ptx::movmatrix_trans(attn::pack_half2(pr[u][2] * w1, pr[u][3] * w1));
        } else {
          if constexpr (kAttnSplitP) {
            uint32_t h[2], l[2];
            attn::split_bf162(pr[u][0], pr[u][1], h[0], l[0]);
            attn::split_bf162(pr[u][2], pr[u][3], h[1], l[1]);
            pb[0] = ptx::movmatrix_trans(h[0]);
            pb[1] = ptx::movmatrix_trans(h[1]);
            pl[0] = ptx::movmatrix_trans(l[0]);
            pl[1] = ptx::movmatrix_trans(l[1]);
          } else {
            pb[0] = ptx::movmatrix_trans(attn::pack_bf162(pr[u][0], pr[u][1]));
            pb[1] = ptx::movmatrix_trans(attn::pack_bf162(pr[u][2], pr[u][3]));
          }
          const int t0 = 16 * step_of(i, u);
          if (t0 + 16 > len) {  // last step: masked V rows may hold anything (NaN * 0 = NaN)
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (t0 + 2 * c + (j % 2) + 8 * (j / 2) >= len)
#pragma unroll
                for (int w = 0; w < StepT::kVW; ++w) cur[u].v[j][w] = 0u;
          }
        }
        // O^T += V^T P^T
        if constexpr (kInt4) {
#pragma unroll
          for (int w = 0; w < StepT::kVW; ++w)
#pragma unroll
            for (int hlf = 0; hlf < 2; ++hlf) {
              const uint32_t sel = hlf == 0 ? 0x5410u : 0x7632u;
              uint32_t t01[4], t89[4];  // tokens (2c, 2c+1) and (2c+8, 2c+9)
              layout::int4x8_to_half2_hi16(attn::prmt(cur[u].v[0][w], cur[u].v[1][w], sel), t01);
              layout::int4x8_to_half2_hi16(attn::prmt(cur[u].v[2][w], cur[u].v[3][w], sel), t89);
#pragma unroll
              for (int x = 0; x < 2; ++x) {
                const int mt =
                    4 * w + 2 * hlf + x;  // r[2x]: low nibbles (row g), r[2x+1]: high (row g + 8, x16)
                const uint32_t a[4] = {t01[2 * x], t01[2 * x + 1], t89[2 * x], t89[2 * x + 1]};
                ptx::mma_m16n8k16_f16(o[mt], a, pb);
              }
            }
        } else {
#pragma unroll
          for (int mt = 0; mt < kSteps; ++mt) {
            const uint32_t a[4] = {attn::prmt(cur[u].v[0][mt], cur[u].v[1][mt], 0x5410u),
                                   attn::prmt(cur[u].v[0][mt], cur[u].v[1][mt], 0x7632u),
                                   attn::prmt(cur[u].v[2][mt], cur[u].v[3][mt], 0x5410u),
                                   attn::prmt(cur[u].v[2][mt], cur[u].v[3][mt], 0x7632u)};
            ptx::mma_m16n8k16_bf16(o[mt], a, pb);
            if constexpr (kAttnSplitP) ptx::mma_m16n8k16_bf16(o[mt], a, pl);
          }
        }
      }
    }

    // ---- merge the warps ------------------------------------------------------------
    if constexpr (kInt4) {
      ptx::cp_async_wait<0>();
#pragma unroll
      for (int mt = 0; mt < kSteps; ++mt) {  // rows g + 8 came from 16 (n - 8) (int4x8_to_half2_hi16)
        o[mt][2] *= 0.0625f;
        o[mt][3] *= 0.0625f;
      }
    }
    // o_s(warp) is this warp's own memory (its ring's second half, or its rows
    // of the BF16 buffer, free since the last chunk's merge): its lanes are done
    // reading the ring and their copies have landed.
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int off = 4; off < 32; off *= 2) lrun[j] += __shfl_xor_sync(0xffffffffu, lrun[j], off);
    if (g == 0) {
      m_s[warp][2 * c] = mrun[0];
      m_s[warp][2 * c + 1] = mrun[1];
      l_s[warp][2 * c] = lrun[0];
      l_s[warp][2 * c + 1] = lrun[1];
    }
    float(*const o_mine)[D + 4] = o_s(warp);
#pragma unroll
    for (int mt = 0; mt < kSteps; ++mt) {
      const int d = g * (D / 8) + 2 * mt;
      o_mine[2 * c][d] = o[mt][0];
      o_mine[2 * c + 1][d] = o[mt][1];
      o_mine[2 * c][d + 1] = o[mt][2];
      o_mine[2 * c + 1][d + 1] = o[mt][3];
    }
    const int merged = chunk;  // the chunk merged below
    // The next chunk's first iteration in flight during the merge (ring stages not in o_s).
    if (++chunk < chunk_end) {
      enter_chunk();
      prefetch_chunk();
    }
    __syncthreads();
    // kThreads / G threads per head row: each computes the row's warp weights
    // 2^(m_w - M) and sum once, then its dims of the row.
    if (const int per_row = kThreads / G, r = tid / per_row; r < G) {
      float mmax = -INFINITY;
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) mmax = fmaxf(mmax, m_s[w][r]);
      const float mref = mmax == -INFINITY ? 0.f : mmax;
      float f[kAttnWarps], l = 0.f;
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) {
        f[w] = exp2f(m_s[w][r] - mref);
        l += f[w] * l_s[w][r];
      }
      const size_t row = size_t(b) * n_heads + size_t(head) * G + r;
      for (int d = tid % per_row; d < D; d += per_row) {
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < kAttnWarps; ++w) acc += f[w] * o_s(w)[r][d];
        if (p.splits > 1) {
          p.o_part[(row * p.splits + merged) * D + d] = acc;
          if (d == 0) {
            p.ml_part[(row * p.splits + merged) * 2 + 0] = mmax;
            p.ml_part[(row * p.splits + merged) * 2 + 1] = l;
          }
        } else {
          q_s[r][d] = l > 0.f ? acc / l : 0.f;  // q_s is free: the merged output rows
        }
      }
    }
    // Every thread is done with o_s, m_s and l_s before the next chunk's merge writes them.
    if (chunk < chunk_end) __syncthreads();
  }  // chunks

  // ---- split-KV: the last CTA of (sequence, KV head) to finish combines ----------
  //   M = max_s m_s, w_s = 2^(m_s - M), out = sum_s w_s O_s / sum_s w_s l_s
  if (p.splits > 1) {
    int& is_last = *sm.is_last;
    __threadfence();  // this CTA's partials are visible before its arrival counts
    __syncthreads();
    if (tid == 0) {
      int* counter = p.counters + size_t(b) * p.kv_heads + head;
      is_last = atomicAdd(counter, 1) == int(unit.nx()) - 1;  // one arrival per unit of the x extent
      if (is_last) *counter = 0;                              // ready for the next launch (graph replays)
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // (1) One warp per head: the chunks' weights 2^(m_s - M) (shared memory) and L.
    // NOTE: other CTAs wrote the partials: __ldcg reads them from L2, never a stale L1 line.
    float* wts = reinterpret_cast<float*>(smem_raw);  // [G][splits]
    float* const lsum = sm.lsum;
    for (int r = warp; r < G; r += kAttnWarps) {
      const float* ml = p.ml_part + (size_t(b) * n_heads + size_t(head) * G + r) * p.splits * 2;
      float mmax = -INFINITY;
      for (int sp = lane; sp < n_chunks; sp += 32) mmax = fmaxf(mmax, __ldcg(ml + 2 * sp));
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, off));
      const float mref = mmax == -INFINITY ? 0.f : mmax;
      float l = 0.f;
      for (int sp = lane; sp < n_chunks; sp += 32) {
        const float w = exp2f(__ldcg(ml + 2 * sp) - mref);
        wts[r * p.splits + sp] = w;
        l += w * __ldcg(ml + 2 * sp + 1);
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
      if (lane == 0) lsum[r] = l;
    }
    __syncthreads();
    // (2) Four dims per thread (16-byte loads), the chunks unrolled for loads in flight.
    for (int i = tid; i < G * D / 4; i += kThreads) {
      const int r = i / (D / 4), d = 4 * (i % (D / 4));
      const float4* op = reinterpret_cast<const float4*>(
          p.o_part + (size_t(b) * n_heads + size_t(head) * G + r) * p.splits * D + d);
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
      for (int sp = 0; sp < n_chunks; ++sp) {
        const float w = wts[r * p.splits + sp];
        const float4 o4 = __ldcg(op + size_t(sp) * (D / 4));
        acc.x += w * o4.x;
        acc.y += w * o4.y;
        acc.z += w * o4.z;
        acc.w += w * o4.w;
      }
      const float inv = lsum[r] > 0.f ? 1.f / lsum[r] : 0.f;
      q_s[r][d] = acc.x * inv;
      q_s[r][d + 1] = acc.y * inv;
      q_s[r][d + 2] = acc.z * inv;
      q_s[r][d + 3] = acc.w * inv;
    }
  }
  __syncthreads();
  if (kInt4 && p.rot_block > 0)
    hadamard_rows_smem(&q_s[0][0], G, D + 4, D, p.rot_block, tid, kThreads, [] { __syncthreads(); });
  for (int i = tid; i < G * D; i += kThreads) {
    const int r = i / D, d = i % D;
    p.out[(size_t(b) * n_heads + size_t(head) * G + r) * D + d] = __float2bfloat16_rn(q_s[r][d]);
  }
}

// Four CTAs (16 warps) per SM: the bound caps the registers at 128 per thread,
// which keeps them resident (left free, ptxas took 136 for the BF16 path).
template <int D, KvKind KIND>
__global__ void __launch_bounds__(kAttnWarps * 32, 4)
    sm90_decode_attention_kernel(const DecodeAttentionParams p) {
  using Smem = DecodeAttentionSmem<D, KIND>;
  __shared__ float q_s[8][D + 4];
  __shared__ __align__(16) uint8_t smem_raw[Smem::kRawBytes];
  __shared__ float m_s[kAttnWarps][8], l_s[kAttnWarps][8];
  __shared__ float lsum[8];
  __shared__ int is_last;
  const Smem sm{q_s, smem_raw, m_s, l_s, lsum, &is_last};
  decode_attention_unit<D, KIND>(p, BlockUnit{}, gridDim.x * gridDim.y * gridDim.z, sm, PdlDeps{});
}

}  // namespace futr::device
