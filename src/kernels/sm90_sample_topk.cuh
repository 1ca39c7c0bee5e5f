// sm90_sample_topk: the next token of each row drawn on the GPU from its FP32
// logits with the host sampler's rule (runtime/sampler.h, steps 1-5), so that
// a sampled decode step returns one int per row instead of the row's logits:
//
//   1. the k = min(top_k, vocab) largest logits, ties by the lower id;
//   2. p_i = exp((z_i - z_max) / T) in double, normalized in descending order;
//   3. min-p: keep the prefix with p_i >= min_p * p_0, renormalized;
//   4. nucleus: the shortest prefix whose sum reaches top_p, renormalized;
//   5. the first id whose cumulative p exceeds u (else the last kept id).
//
// u is drawn by the host from the sequence's generator (Sampler::next_uniform),
// and every sum runs in the host's order (one thread, double), so the token is
// the host's for the same logits: they can differ only where the GPU's exp()
// and the host's differ in the last bit and u falls within that of a
// boundary. Penalties (step 0) and top_k outside 1..kSampleMaxTopK stay on the
// host (Sampler::engine_drawable).
//
// One CTA of kSampleThreads per row:
//   select  the k-th largest key of the order-preserving uint32 image of the
//           logits, 8 bits per pass (4 passes of a shared-memory histogram
//           over the row, read from L2);
//   gather  the keys above it (any order) and, in id order (a block scan per
//           tile), the first of those equal to it that complete k;
//   sort    the k candidates as 64-bit (~key, id), ascending: descending
//           logit, ascending id (cub::BlockRadixSort, 2 per thread);
//   draw    steps 2-5 (the exps in parallel, the sums in thread 0).
// A row whose top_k is 0 is not sampled here (out = -1). A row whose largest
// kept logit is -inf gets out = -2 (the host's rule then names the problem);
// NaN / +inf rows are the caller's to detect (sm90_logits_reduce counts them)
// and whatever token they produce here is discarded.
//
// Launcher: src/launch/decode_ops.cu (sample_topk). Reference: runtime::Sampler
// (sample_with). Test: tests/kernels/sample_topk_test.cpp. Graph-capturable.
// Work unit: sample_topk_unit (the contract: kernels/work_unit.h); the __global__ kernel
// is its wrapper, one CTA per unit.
#pragma once

#include <math_constants.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "kernels/ptx/pdl.cuh"
#include "kernels/work_unit.h"

namespace futr::device {

// One row's sampler (the host mirror is cuda::SampleRow).
struct SampleRow {
  double u = 0;           // the uniform in [0, 1) the host drew for this draw
  float temperature = 1;  // > 0
  float top_p = 1;        // (0, 1]
  float min_p = 0;        // [0, 1]
  int top_k = 0;          // 1..kSampleMaxTopK; 0: not sampled here
};

struct SampleParams {
  const float* logits = nullptr;    // [rows][ld] FP32
  int64_t ld = 0;                   // elements between rows
  int vocab = 0;                    // drawable ids [0, vocab)
  const SampleRow* rows = nullptr;  // [rows]
  int* out = nullptr;               // [rows] the token; -1 not sampled, -2 nothing drawable
};

inline constexpr int kSampleThreads = 512;
inline constexpr int kSampleMaxTopK = 2 * kSampleThreads;  // the sort's capacity

namespace sample {

// Larger float -> larger key (NaN anywhere: the row is discarded by the caller).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

}  // namespace sample

// Shared memory of one unit, as a view of its pieces (work_unit.h: why not one struct).
struct SampleTopkSmem {
  using Sort = cub::BlockRadixSort<unsigned long long, kSampleThreads, 2>;
  using Scan = cub::BlockScan<int, kSampleThreads>;
  union Tmp {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
  };
  Tmp* tmp;
  uint32_t* hist;            // [256]
  unsigned long long* cand;  // [kSampleMaxTopK] (~key << 32) | id
  double* prob;              // [kSampleMaxTopK]
  uint32_t* prefix;
  int *rank, *gt, *keep;
  double* div;
  // Its bytes (the static declarations of the kernel below, unpadded).
  static constexpr size_t kBytes = sizeof(Tmp) + 256 * 4 + kSampleMaxTopK * (8 + 8) + 4 + 3 * 4 + 8;
};

// One row (work_unit.h): unit = the row, kSampleThreads threads.
template <class Deps>
__device__ __forceinline__ void sample_topk_unit(const SampleParams& p, int unit, int /*units*/,
                                                 const SampleTopkSmem& sm, const Deps& deps) {
  using Sort = SampleTopkSmem::Sort;
  using Scan = SampleTopkSmem::Scan;
  auto& tmp = *sm.tmp;
  uint32_t* const hist = sm.hist;
  unsigned long long* const cand = sm.cand;
  double* const prob = sm.prob;
  uint32_t& s_prefix = *sm.prefix;
  int &s_rank = *sm.rank, &s_gt = *sm.gt, &s_keep = *sm.keep;
  double& s_div = *sm.div;

  const int tid = threadIdx.x, row = unit;
  deps.wait();  // the logits and the rows' samplers come from the ops / copies before
  deps.release();
  const SampleRow r = p.rows[row];
  if (r.top_k <= 0) {
    if (tid == 0) p.out[row] = -1;
    return;
  }
  const float* const z = p.logits + size_t(row) * size_t(p.ld);
  const int n = p.vocab;
  const int k = min(min(r.top_k, kSampleMaxTopK), n);

  // ---- select: the k-th largest key, 8 bits at a time ----------------------------
  uint32_t prefix = 0, mask = 0;
  int rank = k;  // how many keys matching the prefix are still needed, from the top
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kSampleThreads) hist[i] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kSampleThreads) {
      const uint32_t key = sample::order_key(z[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + int(hist[d]) >= rank) break;
        above += int(hist[d]);
      }
      s_rank = rank - above;
      s_prefix = prefix | (uint32_t(d) << shift);
    }
    __syncthreads();
    rank = s_rank, prefix = s_prefix, mask |= 255u << shift;
  }
  // prefix: the k-th largest key; rank: how many of the keys equal to it are taken.

  // ---- gather: every key above, the first `rank` equal ones in id order -----------
  if (tid == 0) s_gt = 0;
  __syncthreads();
  const int n_gt = k - rank;
  int eq_base = 0;
  for (int i0 = 0; i0 < n; i0 += kSampleThreads) {
    const int i = i0 + tid;
    const uint32_t key = i < n ? sample::order_key(z[i]) : 0u;
    const bool gt = i < n && key > prefix, eq = i < n && key == prefix;
    const unsigned long long packed = (static_cast<unsigned long long>(~key) << 32) | uint32_t(i);
    if (gt) cand[atomicAdd(&s_gt, 1)] = packed;
    int pos = 0, tot = 0;
    Scan(tmp.scan).ExclusiveSum(int(eq), pos, tot);
    if (eq && eq_base + pos < rank) cand[n_gt + eq_base + pos] = packed;
    eq_base += tot;
    __syncthreads();  // the scan's storage is reused by the next tile
  }

  // ---- sort: ascending (~key, id) = descending logit, ascending id ----------------
  unsigned long long items[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int idx = 2 * tid + j;
    items[j] = idx < k ? cand[idx] : ~0ull;
  }
  __syncthreads();
  Sort(tmp.sort).Sort(items);
#pragma unroll
  for (int j = 0; j < 2; ++j)
    if (2 * tid + j < k) cand[2 * tid + j] = items[j];
  __syncthreads();

  // ---- draw: runtime::Sampler::distribution, then the inverse CDF at u ------------
  auto id_of = [&](int i) { return int(uint32_t(cand[i] & 0xffffffffu)); };
  const double zmax = double(z[id_of(0)]);
  if (zmax == -CUDART_INF) {  // nothing drawable: the host's check names it
    if (tid == 0) p.out[row] = -2;
    return;
  }
  const double T = double(r.temperature);
  for (int i = tid; i < k; i += kSampleThreads) prob[i] = exp((double(z[id_of(i)]) - zmax) / T);
  __syncthreads();
  // Normalizes prob[0, keep) by s_div (in parallel).
  auto divide = [&](int keep) {
    __syncthreads();
    for (int i = tid; i < keep; i += kSampleThreads) prob[i] /= s_div;
    __syncthreads();
  };
  if (tid == 0) {
    double sum = 0.0;
    for (int i = 0; i < k; ++i) sum += prob[i];
    s_div = sum;
  }
  divide(k);
  int keep = k;
  if (r.min_p > 0.0f) {
    if (tid == 0) {
      const double floor = double(r.min_p) * prob[0];
      int kp = 1;
      while (kp < k && prob[kp] >= floor) ++kp;
      double kept = 0.0;
      for (int i = 0; i < kp; ++i) kept += prob[i];
      s_keep = kp, s_div = kept;
    }
    __syncthreads();
    if (s_keep < keep) {
      keep = s_keep;
      divide(keep);
    }
  }
  if (r.top_p < 1.0f) {
    if (tid == 0) {
      double cum = 0.0;
      int kp = 0;
      while (kp < keep) {
        cum += prob[kp];
        ++kp;
        if (cum >= double(r.top_p)) break;
      }
      s_keep = kp, s_div = cum;
    }
    __syncthreads();
    keep = s_keep;
    divide(keep);
  }
  if (tid == 0) {
    double cum = 0.0;
    int token = id_of(keep - 1);  // u within rounding of 1
    for (int i = 0; i < keep; ++i) {
      cum += prob[i];
      if (r.u < cum) {
        token = id_of(i);
        break;
      }
    }
    p.out[row] = token;
  }
}

static __global__ void __launch_bounds__(kSampleThreads) sm90_sample_topk_kernel(const SampleParams p) {
  __shared__ SampleTopkSmem::Tmp tmp;
  __shared__ uint32_t hist[256];
  __shared__ unsigned long long cand[kSampleMaxTopK];
  __shared__ double prob[kSampleMaxTopK];
  __shared__ uint32_t s_prefix;
  __shared__ int s_rank, s_gt, s_keep;
  __shared__ double s_div;
  const SampleTopkSmem sm{&tmp, hist, cand, prob, &s_prefix, &s_rank, &s_gt, &s_keep, &s_div};
  sample_topk_unit(p, blockIdx.x, gridDim.x, sm, PdlDeps{});
}

}  // namespace futr::device
