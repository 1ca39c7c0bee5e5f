// The stream-K pieces shared by the dev/ decode GEMM kernels
// sm90_w4a16_stream.cuh and sm90_w4a16_sk.cuh (src/kernels/sm90_w4a16_common.cuh
// holds the rest): the item ranges of a stream-K partition of the grid and the
// segment epilogue with its deterministic last-contributor reduction.
#pragma once

#include "kernels/sm90_w4a16_common.cuh"

namespace futr::device {

// First item of CTA i of P over T items, and the CTA that owns item t.
__device__ __forceinline__ int stream_first(int i, int total, int ctas) {
  return int((long long)i * total / ctas);
}
__device__ __forceinline__ int stream_owner(int t, int total, int ctas) {
  return int(((long long)(t + 1) * ctas - 1) / total);
}

// The segment epilogue.
// A CTA finished a segment of tile group `grp` (gt tiles; this warp owns tiles
// wtile .. wtile + TM - 1 of it). whole: the segment covered all of K, so y is
// written directly. Otherwise the partial goes to ws[seg][M][128]; the last of
// the group's contributors c_first..c_last (the arrival counter of the group)
// sums the partials ws[grp + c_first .. grp + c_last] in order (deterministic),
// writes y and re-arms the counter. sync() is a barrier over every thread that
// calls this (thread 0 among them); s_last one word of shared memory. acc is
// zeroed for the next segment. nthreads: the threads that call this (threads
// 0..nthreads-1), which share the reduction.
template <class WF, int MT, int TM, class Sync>
__device__ __forceinline__ void segment_store(const DecodeParams& p, float (&acc)[TM][MT][4], int grp, int gt,
                                              int wtile, bool whole, int seg, int c_first, int c_last,
                                              uint32_t* s_last, Sync sync, int nthreads, int g, int c) {
  bool tok[TM];
  float cs[TM][2];  // per-channel scales of the E4M3 path
#pragma unroll
  for (int tm = 0; tm < TM; ++tm) {
    tok[tm] = wtile + tm < gt;
    cs[tm][0] = cs[tm][1] = 1.f;
    if constexpr (!WF::kGroupScales)
      if (tok[tm]) {
        const float* sp = static_cast<const float*>(p.scales) +
                          size_t(grp * layout::kTileGroup + wtile + tm) * layout::kTileN + g;
        cs[tm][0] = sp[0], cs[tm][1] = sp[8];
      }
  }
  auto chan = [&](int tm, int i) { return (wtile + tm) * layout::kTileN + g + 8 * (i / 2); };  // in the group
  auto row_of = [&](int mt, int i) { return 8 * mt + 2 * c + (i % 2); };
  auto store_y = [&](int tm, int mt, int i, float v) {
    p.y[size_t(row_of(mt, i)) * p.n + size_t(grp) * 128 + chan(tm, i)] =
        __float2bfloat16_rn(v * cs[tm][i / 2]);
  };
  auto part = [&](int sg, int tm, int mt, int i) -> float* {
    return p.ws + (size_t(sg) * p.m + row_of(mt, i)) * 128 + chan(tm, i);
  };
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (tok[tm] && row_of(mt, i) < p.m) {
          if (whole) store_y(tm, mt, i, acc[tm][mt][i]);
          else *part(seg, tm, mt, i) = acc[tm][mt][i];
        }
        acc[tm][mt][i] = 0.f;
      }
  if (whole) return;
  // NOTE: release: every thread's partials are visible device-wide before the
  // counter moves; the last contributor's fence orders its reads after the atomic.
  __threadfence();
  sync();
  if (threadIdx.x == 0) *s_last = atomicAdd(&p.counters[grp], 1u) == uint32_t(c_last - c_first);
  sync();
  if (!*s_last) return;
  __threadfence();
  reduce_partials<WF>(
      p, [&](int r, int row, int ch) { return p.ws + (size_t(grp + c_first + r) * p.m + row) * 128 + ch; },
      c_last - c_first + 1, p.m, gt * layout::kTileN, size_t(grp) * 128, nthreads);
  if (threadIdx.x == 0) p.counters[grp] = 0u;  // re-arm for the next launch
}

}  // namespace futr::device
