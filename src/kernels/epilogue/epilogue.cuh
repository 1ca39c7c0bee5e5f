// Epilogue framework of the sm90 GEMM: compile-time policies applied to the
// output tile while it is still on chip, composed as a flat list of ops:
//
//   using ScaledOut = Chain<ColScale, StoreBf16>;          // policies.cuh has the list
//
// Two passes run per output tile, in the order the ops are listed:
//
// 1. Fragment pass (registers). Each consumer thread holds its part of the
//    warpgroup's 64 x BN FP32 accumulator in the WGMMA fragment layout
//    (kernels/ptx/wgmma.cuh): acc[4j + 2h + e] is row frow[h] = m0 + 64*wg +
//    16*warp + lane/4 + 8h, column n0 + 8j + 2*(lane%4) + e. Ops that need
//    column pairs far apart (RoPE pairs d with d + D/2) or cheap per-row /
//    per-column scaling work here. Hook: fragment(p, tile, frag, acc, st).
//
// 2. Piece pass (after staging through shared memory). The warpgroup writes
//    the accumulators chunk by chunk (64 rows x 32 columns, FP32) to a
//    per-warpgroup shared buffer and reads them back row-wise: a thread gets
//    4 consecutive columns of one row ("piece"), 8 threads cover a 32-column
//    row segment, so global loads/stores of residuals and outputs are
//    coalesced. Iteration it = 0..3 of a chunk handles row prow[it] = m0 +
//    64*wg + 16*it + tid/8 (the same rows in every chunk, so per-row state
//    lives in registers). Hook: piece(p, tile, c, it, row, col, v[4], st), called
//    only for row < M and col < N (N % 8 == 0, so a piece is all in or all out);
//    c is the chunk index (compile-time after unrolling, like it).
//    Sinks (Store*) write the piece; ops after a sink see the values as stored.
//
// Other hooks, all optional (no-op defaults in OpBase), in call order:
//   begin(p, t, st)           once per thread before its first tile (per-kernel
//                             constants, e.g. the request table of a row map)
//   prefetch(p, t, st)        per tile BEFORE the main loop: issue loads whose
//                             results are used only in the epilogue (column
//                             scales, row factors, L2 prefetch of residuals), so
//                             their latency hides behind the tile's MMAs
//   tile_begin(p, t, st)      after the main loop (per-row lookups)
//   fragment(...)             pass 1, see above
//   chunk_begin(p, t, c, st)  before staging chunk c (register prefetch of the
//                             global data chunk c+2 needs)
//   piece(...)                pass 2, see above
//   tile_end(p, t, st)        per-row reductions (row sums of squares)
//   finish(p, st)             once per thread after its last tile (grid-wide
//                             reductions such as amax)
// NOTE: in the cooperative schedule the epilogue is not overlapped with MMAs
// (both consumer warpgroups run it at once), and in ping-pong it is hidden only
// while it is shorter than the other warpgroup's main loop, so every
// global-memory latency it waits on can be lost tensor-core time:
// loads are issued in prefetch/chunk_begin, never where their value is used.
//
// Params: each op declares `struct Params` (its device pointers and scalars,
// a shape comment per field); Chain<Ops...>::Params derives from all of them,
// so the launcher fills one flat struct and each op sees its own base.
#pragma once

#include <cstdint>

namespace futr::device::epi {

// Where the current output tile is, and the consumer warpgroup's resources.
struct TileCtx {
  int m0, n0;     // tile origin (rows, columns) in C
  int M, N;       // problem size
  int bn;         // tile width (columns)
  int tid;        // thread index in the consumer warpgroup, 0..127
  int wg_row0;    // first row of this warpgroup's 64-row half: m0 + 64 * wg
  int bar_id;     // named barrier of this warpgroup (bar.sync bar_id, 128)
  float* colvec;  // [bn] shared-memory column vector of this warpgroup (ColScale)
};

// Fragment coordinates of this thread (see the layout above).
struct FragCoord {
  int col0;  // 2 * (lane % 4): column of acc[4j] within 8-column block j
};

// Per-thread epilogue state: a fixed vocabulary shared by all ops (unused
// fields cost nothing: the compiler drops them).
struct EpiState {
  int frow[2];       // fragment-pass rows (global; may be >= M)
  int prow[4];       // piece-pass rows (global; may be >= M), by iteration it
  int frag_pos[2];   // RoPE position of frow[h]
  int slot[4];       // KV-cache slot of prow[it] (-1: write no K/V)
  int req[3];        // warp-cached row-map entries of request `lane` (row maps, R <= 32)
  float a_scale;     // prefetched per-tensor scale
  float col_pre[2];  // prefetched column scales of columns n0 + 2 tid, +1
  float row_pre[2];  // prefetched per-row values of frow[h] (RMS sums of squares)
  float row_acc[4];  // per-row partial sums of prow[it] (sum of squares)
  uint2 res[3][4];   // residual pieces of chunks c, c+1, c+2 (ring by c % 3), by it
  float qscale;      // 1 / dequantization scale of an FP8 output (raw scale until tile_begin)
  float amax;        // running max |y| over this thread's tiles
  uint32_t sat;      // running count of saturated FP8 outputs
};

// Default (no-op) hooks; ops derive from this and shadow what they use.
struct OpBase {
  template <class P>
  __device__ __forceinline__ static void begin(const P&, const TileCtx&, EpiState&) {}
  template <class P>
  __device__ __forceinline__ static void prefetch(const P&, const TileCtx&, EpiState&) {}
  template <class P>
  __device__ __forceinline__ static void tile_begin(const P&, const TileCtx&, EpiState&) {}
  template <class P>
  __device__ __forceinline__ static void chunk_begin(const P&, const TileCtx&, int, EpiState&) {}
  template <class P, int NREG>
  __device__ __forceinline__ static void fragment(const P&, const TileCtx&, const FragCoord&, float (&)[NREG],
                                                  EpiState&) {}
  template <class P>
  __device__ __forceinline__ static void piece(const P&, const TileCtx&, int, int, int, int, float (&)[4],
                                               EpiState&) {}
  template <class P>
  __device__ __forceinline__ static void tile_end(const P&, const TileCtx&, EpiState&) {}
  template <class P>
  __device__ __forceinline__ static void finish(const P&, EpiState&) {}
};

// A policy: ops applied in list order in each pass.
template <class... Ops>
struct Chain {
  struct Params : Ops::Params... {};

  __device__ __forceinline__ static void begin(const Params& p, const TileCtx& t, EpiState& st) {
    (Ops::begin(p, t, st), ...);
  }
  __device__ __forceinline__ static void prefetch(const Params& p, const TileCtx& t, EpiState& st) {
    (Ops::prefetch(p, t, st), ...);
  }
  __device__ __forceinline__ static void tile_begin(const Params& p, const TileCtx& t, EpiState& st) {
    (Ops::tile_begin(p, t, st), ...);
  }
  __device__ __forceinline__ static void chunk_begin(const Params& p, const TileCtx& t, int c, EpiState& st) {
    (Ops::chunk_begin(p, t, c, st), ...);
  }
  template <int NREG>
  __device__ __forceinline__ static void fragment(const Params& p, const TileCtx& t, const FragCoord& f,
                                                  float (&acc)[NREG], EpiState& st) {
    (Ops::fragment(p, t, f, acc, st), ...);
  }
  __device__ __forceinline__ static void piece(const Params& p, const TileCtx& t, int c, int it, int row,
                                               int col, float (&v)[4], EpiState& st) {
    (Ops::piece(p, t, c, it, row, col, v, st), ...);
  }
  __device__ __forceinline__ static void tile_end(const Params& p, const TileCtx& t, EpiState& st) {
    (Ops::tile_end(p, t, st), ...);
  }
  __device__ __forceinline__ static void finish(const Params& p, EpiState& st) { (Ops::finish(p, st), ...); }
};

// ---- small helpers shared by the ops ---------------------------------------

// Two floats -> packed bf16x2 (round to nearest even), low half = a.
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
  return r;
}
__device__ __forceinline__ float bf16_lo(uint32_t x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t x) { return __uint_as_float(x & 0xffff0000u); }

}  // namespace futr::device::epi
