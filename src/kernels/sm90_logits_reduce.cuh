// sm90_logits_reduce: the per-row reductions of the LM head's FP32 logits that
// the decode step returns instead of the logits themselves (greedy tokens and
// the log-probabilities perplexity needs), one CTA per row:
//
//   m        = max_i z_i                     over the entries that are not NaN
//   argmax   = min { i : z_i == m }          (the lowest id among ties; 0 if every entry is NaN)
//   lse      = m + log(sum_i exp(z_i - m))   (-inf when m == -inf; +inf when m == +inf)
//   logprob  = z[target] - lse               (target >= 0; -inf when m == -inf)
//   nonfinite= #{ i : z_i is NaN or +inf }   (-inf is a legal logit: a masked id)
//
// The reference is ref::logits_reduce (src/reference/logits_reduce_ref.h), in
// double. Here: pass 1 (max, argmax, nonfinite) in FP32 with a warp-shuffle +
// shared-memory tree; pass 2 re-reads the row (from L2: a row is <= 1 MB) and
// sums expf(z_i - m) with each thread's partial in FP64, then a FP64 tree. Why
// FP64 partials: a 128k-entry row summed in FP32 loses ~1e-6 relative, which
// would be visible in a perplexity delta of 1e-3 over 32k tokens; FP64 adds
// cost nothing next to the expf. expf (not __expf): <= 2 ulp, so |lse - ref| is
// ~1e-7 (the tolerance table's kLogitsReduce bound).
//
// NOTE: one CTA per row reads the row at one SM's bandwidth (~5 us for a 128k
// vocabulary, <1% of an 8B step); a split over several CTAs per row with a
// last-CTA merge (as in sm90_decode_attention) is the next step if a profile
// ever shows it.
//
// Launcher: src/launch/decode_ops.cu (logits_reduce). Test:
// tests/kernels/logits_reduce_test.cpp (random rows, ties, -inf, NaN, vocab
// tails). Graph-capturable (no allocation, no synchronization).
// Work unit: logits_reduce_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include <math_constants.h>

#include <cstdint>
#include "kernels/ptx/pdl.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

// One output row's results (the host mirror is cuda::LogitsRowStats; the
// launcher static_asserts the two layouts agree).
struct LogitsRowStats {
  double lse = 0;      // log sum_i exp(z_i)
  double logprob = 0;  // z[target] - lse; 0 when the row has no target
  float max = 0;       // max_i z_i (NaN excluded)
  int argmax = 0;      // lowest id reaching max
  int nonfinite = 0;   // entries that are NaN or +inf
  int pad = 0;
};

struct LogitsReduceParams {
  const float* logits = nullptr;  // [rows][ld] FP32
  int64_t ld = 0;                 // elements between rows (>= vocab)
  int vocab = 0;                  // entries per row
  const int* targets = nullptr;   // [rows] target id per row, < 0: none; null: no row has one
  LogitsRowStats* out = nullptr;  // [rows]
};

inline constexpr int kLogitsThreads = 1024;

namespace logits {

// (v, i) beats (bv, bi): larger value, or the same value at a lower id. NaN
// never beats anything and is beaten by everything that is not NaN.
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi) || (bv != bv && v == v);
}

}  // namespace logits

// Shared memory of one unit: the warps' partial results, as a view of its
// pieces (work_unit.h).
struct LogitsReduceSmem {
  static_assert(kLogitsThreads % 32 == 0 && kLogitsThreads <= 1024, "whole warps, one CTA");
  static constexpr int kWarps = kLogitsThreads / 32;
  float* val;   // [kWarps] the warps' max
  int* idx;     // [kWarps] its lowest id
  int* bad;     // [kWarps] non-finite counts
  double* sum;  // [kWarps] sums of exp
  float* max;   // the row's max
  static constexpr size_t kBytes = kWarps * (4 + 4 + 4 + 8) + 4;
};

// One row (work_unit.h): unit = the row, kLogitsThreads threads.
template <class Deps>
__device__ __forceinline__ void logits_reduce_unit(const LogitsReduceParams& p, int unit, int /*units*/,
                                                   const LogitsReduceSmem& sm, const Deps& deps) {
  deps.release();  // the next op may start (launch executor: PDL, ptx/pdl.cuh)
  deps.wait();     // everything it reads may come from the op before

  constexpr int kWarps = LogitsReduceSmem::kWarps;
  const int row = unit, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* z = p.logits + size_t(row) * size_t(p.ld);

  // ---- shared memory ----------------------------------------------------------
  float* const s_val = sm.val;
  int* const s_idx = sm.idx;
  int* const s_bad = sm.bad;
  double* const s_sum = sm.sum;
  float& s_max = *sm.max;

  // ---- pass 1: max, argmax, non-finite count -------------------------------------
  float bv = CUDART_NAN_F;  // NaN: beaten by any number
  int bi = 0x7fffffff;
  int bad = 0;
  for (int i = tid; i < p.vocab; i += kLogitsThreads) {
    const float v = z[i];
    bad += (v != v || v == CUDART_INF_F) ? 1 : 0;
    if (logits::beats(v, i, bv, bi)) bv = v, bi = i;  // ids grow along the loop: ties keep the first
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    bad += __shfl_xor_sync(0xffffffffu, bad, o);
    if (logits::beats(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  if (lane == 0) s_val[warp] = bv, s_idx[warp] = bi, s_bad[warp] = bad;
  __syncthreads();
  if (warp == 0) {
    bv = lane < kWarps ? s_val[lane] : CUDART_NAN_F;
    bi = lane < kWarps ? s_idx[lane] : 0x7fffffff;
    bad = lane < kWarps ? s_bad[lane] : 0;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      bad += __shfl_xor_sync(0xffffffffu, bad, o);
      if (logits::beats(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) {
      s_max = bv;
      p.out[row].max = bv;
      p.out[row].argmax = bi == 0x7fffffff ? 0 : bi;  // every entry NaN: id 0
      p.out[row].nonfinite = bad;
      p.out[row].pad = 0;
    }
  }
  __syncthreads();
  const float m = s_max;

  // ---- pass 2: sum of exp(z - m) (FP32 terms, FP64 sums) -------------------------
  double sum = 0.0;
  if (m == m && m != -CUDART_INF_F && m != CUDART_INF_F) {
    for (int i = tid; i < p.vocab; i += kLogitsThreads) {
      const float v = z[i];
      if (v == v) sum += double(expf(v - m));  // -inf entries give exp(-inf) = 0
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();

  // ---- epilogue: lse and log p(target) -------------------------------------------
  if (tid == 0) {
    double total = 0.0;
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) total += s_sum[w];
    double lse;
    if (m != m) lse = CUDART_NAN;                    // every entry NaN
    else if (m == -CUDART_INF_F) lse = -CUDART_INF;  // every entry -inf
    else if (m == CUDART_INF_F) lse = CUDART_INF;
    else lse = double(m) + log(total);
    const int t = p.targets ? p.targets[row] : -1;
    double lp = 0.0;
    if (t >= 0 && t < p.vocab) {
      const double zt = double(z[t]);
      lp = lse == -CUDART_INF ? -CUDART_INF : zt - lse;
    }
    p.out[row].lse = lse;
    p.out[row].logprob = lp;
  }
}

static __global__ void __launch_bounds__(kLogitsThreads)
    sm90_logits_reduce_kernel(const LogitsReduceParams p) {
  constexpr int kWarps = LogitsReduceSmem::kWarps;
  __shared__ float s_val[kWarps];
  __shared__ int s_idx[kWarps];
  __shared__ int s_bad[kWarps];
  __shared__ double s_sum[kWarps];
  __shared__ float s_max;
  logits_reduce_unit(p, blockIdx.x, gridDim.x, LogitsReduceSmem{s_val, s_idx, s_bad, s_sum, &s_max},
                     PdlDeps{});
}

}  // namespace futr::device
