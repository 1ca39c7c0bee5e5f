// sm90_fp8_gemm: persistent, warp-specialized TMA + WGMMA GEMM for Hopper (sm_90a)
// with a compile-time epilogue policy.
//
//   C[M, N] = A[M, K] x B[N, K]^T,  FP32 accumulation, then Epi (epilogue/policies.cuh)
//
// Inputs: E4M3 (QGMMA, k32 per instruction) or BF16 (HGMMA, k16), both K-major
// ("TN": A row-major activations, B row-major [N, K] weights). The smem layout
// and descriptor contract are in kernels/ptx/wgmma.cuh.
//
// Structure (384 threads, one CTA per SM, grid = min(tiles, SMs)):
//   warpgroup 0      producer: one thread issues TMA copies of A (BM x 128 B)
//                    and B (BN x 128 B) per K step into a STAGES-deep smem ring;
//                    gives registers back (setmaxnreg.dec).
//   warpgroups 1, 2  consumers (setmaxnreg.inc), two schedules (Schedule):
//     cooperative    both on the same 128 x BN tile, 64 rows each (64 x BN FP32
//                    accumulator = BN/2 registers), both reading every stage;
//                    the paper's 128x256 configuration. Their epilogues run at
//                    the same time, so the tensor cores idle during them.
//     ping-pong      each on its own 128 x 128 tile (alternate tiles of the CTA,
//                    two 64-row halves = 2 x 64 registers); the ring serves the
//                    tiles in order, so one warpgroup's epilogue overlaps the
//                    other's main loop.
//   Each consumer issues 4 WGMMAs per stage (and 64-row half), then runs the
//   epilogue: fragment pass in registers, piece pass through a per-warpgroup
//   smem staging buffer (epilogue/epilogue.cuh).
//   All roles walk the same tile sequence (TileScheduler: static persistent
//   striding over tiles, grouped rasterization for L2 reuse).
// Pipeline: full[s] (TMA bytes landed) and empty[s] (the reading warps are
// done) mbarriers per stage (kernels/ptx/mbarrier.cuh has the protocol).
// Consumers keep one WGMMA group in flight and release a stage when the next
// group is issued and the previous one retired.
//
// Promoted accumulation (Cfg::kPromote; cooperative, BN = 128, E4M3): the FP8
// tensor cores' accumulator keeps fewer bits than FP32, so a K sum of
// thousands of products drifts (the error grows with K). Each stage's 4
// WGMMAs (128 K) start a fresh sum in one of two 64-register buffers, which
// is added into the FP32 sum acc once its group has retired, while the next
// stage's group (the other buffer) runs: 3 x 64 accumulator registers per
// thread.
//
// Limits: K % (16 / sizeof(input)) == 0 (TMA row strides are multiples of 16
// bytes), N % 8 == 0; M, N, K tails are zero-filled by TMA and masked in the
// epilogue. The launcher (src/launch/fp8_gemm.cpp) checks these and the list of
// compiled variants. Test: tests/kernels/fp8_gemm_test.cpp; benchmark:
// bench/fp8_gemm_bench.cpp; walkthrough: docs/WALKTHROUGH_FP8_GEMM.md.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/epilogue/epilogue.cuh"
#include "kernels/ptx/fence.cuh"
#include "kernels/ptx/mbarrier.cuh"
#include "kernels/ptx/tma.cuh"
#include "kernels/ptx/wgmma.cuh"

namespace futr::device {

struct E4M3In {
  static constexpr int kBytes = 1;
};
struct BF16In {
  static constexpr int kBytes = 2;
};

// How the two consumer warpgroups share the work.
enum class Schedule {
  kCooperative,  // both on one BM x BN tile, 64 rows each; epilogues run together (MMAs idle)
  kPingPong,     // each on its own BM x BN tile (alternate tiles): one warpgroup's epilogue
                 // overlaps the other's main loop; BN = 128 (2 x 64 accumulator registers)
};

// Compile-time tile configuration. Promote_: each stage's WGMMA sum (128 bytes
// of K) goes into its own accumulator and is then added into FP32 registers
// (below, "promoted accumulation"); otherwise the whole K sum stays in the
// WGMMA accumulator (fast accumulation).
template <int BM_, int BN_, int STAGES_, class In_, Schedule S_ = Schedule::kCooperative,
          bool Promote_ = false>
struct GemmTile {
  static constexpr int BM = BM_;          // rows per tile
  static constexpr int BN = BN_;          // columns per tile (WGMMA N)
  static constexpr int STAGES = STAGES_;  // TMA ring depth
  using In = In_;
  static constexpr Schedule kSchedule = S_;
  static constexpr bool kPingPong = S_ == Schedule::kPingPong;
  static constexpr int kKBytes = 128;                   // K bytes per stage (one 128B swizzle row)
  static constexpr int kKElems = kKBytes / In::kBytes;  // K elements per stage
  static constexpr int kWgmmaPerStage = 4;              // each WGMMA consumes 32 bytes of K
  static constexpr int kHalves = kPingPong ? 2 : 1;     // 64-row halves per consumer warpgroup
  static constexpr int kNReg = BN / 2;                  // accumulator registers per 64-row half
  static constexpr bool kPromote = Promote_;
};

// Static persistent tile order. Tiles are visited in groups of group_m M-tiles;
// inside a group M varies fastest, so the CTAs running at one time share a few
// A row-blocks and B column-blocks in L2.
struct TileScheduler {
  int m_tiles, n_tiles, group_m;
  __device__ __forceinline__ int num_tiles() const { return m_tiles * n_tiles; }
  __device__ __forceinline__ void coords(int t, int& mt, int& nt) const {
    const int per_group = group_m * n_tiles;
    const int g = t / per_group;
    const int first_m = g * group_m;
    const int gm = min(m_tiles - first_m, group_m);
    const int r = t - g * per_group;
    mt = first_m + r % gm;
    nt = r / gm;
  }
};

// Shared-memory footprint (bytes, excluding the 1024 B alignment slack).
template <class Cfg>
struct GemmSmem {
  static constexpr int kABytes = Cfg::BM * Cfg::kKBytes;  // one stage of A
  static constexpr int kBBytes = Cfg::BN * Cfg::kKBytes;  // one stage of B
  static constexpr int kStageLd = 32 + 8;  // staging row stride, floats (pad: no bank conflicts)
  static constexpr int kStageBytes = 64 * kStageLd * 4;  // per consumer warpgroup
  static constexpr int kAOff = 0;
  static constexpr int kBOff = kAOff + Cfg::STAGES * kABytes;
  static constexpr int kStagingOff = kBOff + Cfg::STAGES * kBBytes;
  static constexpr int kColVecOff = kStagingOff + 2 * kStageBytes;  // [2][BN] floats: ColScale
  static constexpr int kBarOff = kColVecOff + 2 * Cfg::BN * 4;
  static constexpr int kTotal = kBarOff + 2 * Cfg::STAGES * 8 + 2 * 8;  // + ping-pong order[2]
  static constexpr int kDynamic = kTotal + 1024;                        // what the launcher requests
};

inline constexpr int kGemmThreads = 384;
inline constexpr uint32_t kProducerRegs = 40;
inline constexpr uint32_t kConsumerRegs = 232;

namespace sm90_gemm {

// One 64-row x BN slice of the accumulator: 4 WGMMAs (32 bytes of K each) on
// the stage whose A rows start at a_tile.
template <class Cfg>
__device__ __forceinline__ void mma_stage(float (&acc)[Cfg::kNReg], const uint8_t* a_tile,
                                          const uint8_t* b_tile, int k) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kWgmmaPerStage; ++kk) {
    const uint64_t da = ptx::make_wgmma_desc_sw128(a_tile + 32 * kk);
    const uint64_t db = ptx::make_wgmma_desc_sw128(b_tile + 32 * kk);
    const int accumulate = (k > 0 || kk > 0) ? 1 : 0;
    if constexpr (Cfg::In::kBytes == 1) {
      if constexpr (Cfg::BN == 256) ptx::wgmma_m64n256k32_f32_e4m3(acc, da, db, accumulate);
      else ptx::wgmma_m64n128k32_f32_e4m3(acc, da, db, accumulate);
    } else {
      if constexpr (Cfg::BN == 256) ptx::wgmma_m64n256k16_f32_bf16(acc, da, db, accumulate);
      else ptx::wgmma_m64n128k16_f32_bf16(acc, da, db, accumulate);
    }
  }
}

// acc += part, register by register (the promotion of one stage's sum).
template <int N>
__device__ __forceinline__ void add_into(float (&acc)[N], const float (&part)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] += part[i];
}

// One stage of the promoted main loop: wait for stage s, issue its 4 WGMMAs
// into `into` (a fresh sum: `into` retired before and was added), commit,
// then retire the group before it (`prev`, the other buffer), add it into
// acc and release its stage. Only the retired buffer is touched while a group
// is in flight (touching an in-flight accumulator makes ptxas serialize every
// WGMMA of the kernel: warning C7514).
template <class Cfg, bool kHasPrev, class SmemA, class SmemB>
__device__ __forceinline__ void promoted_step(float (&acc)[Cfg::kNReg], float (&into)[Cfg::kNReg],
                                              float (&prev)[Cfg::kNReg], SmemA smem_a, SmemB smem_b,
                                              uint64_t* full, uint64_t* empty, int a_row0, int& s,
                                              uint32_t& phase, int& prev_s, int lane) {
  ptx::mbarrier_wait_parity(&full[s], phase);
  ptx::fence_operands(into);
  ptx::wgmma_fence();
  mma_stage<Cfg>(into, smem_a(s) + a_row0 * Cfg::kKBytes, smem_b(s), /*k=*/0);
  ptx::wgmma_commit_group();
  if constexpr (kHasPrev) {
    ptx::wgmma_wait_group<1>();  // the previous stage's group (prev) has retired
    ptx::fence_operands(prev);
    if (lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);
    add_into(acc, prev);
  }
  prev_s = s;
  if (++s == Cfg::STAGES) {
    s = 0;
    phase ^= 1;
  }
}

// The main loop of one tile with promoted accumulation (see the file comment):
// acc (64-row slice starting at A row a_row0 of each stage) = the FP32 sum of
// the k_iters stages' WGMMA sums. Two stage sums alternate (p0, p1: unrolled
// by two so that each is a fixed set of registers), so the adds of stage k - 1
// run while stage k's group is in flight. s / phase: the ring position of the
// tile's first stage (advanced past its last). Releases every stage it read.
template <class Cfg, class SmemA, class SmemB>
__device__ __forceinline__ void mainloop_promoted(float (&acc)[Cfg::kNReg], SmemA smem_a, SmemB smem_b,
                                                  uint64_t* full, uint64_t* empty, int k_iters, int a_row0,
                                                  int& s, uint32_t& phase, int lane) {
  static_assert(Cfg::kPromote && !Cfg::kPingPong && Cfg::BN == 128 && Cfg::In::kBytes == 1,
                "promoted accumulation: cooperative E4M3 tiles of 128 x 128 (3 x 64 accumulator registers)");
  float p0[Cfg::kNReg], p1[Cfg::kNReg];
#pragma unroll
  for (int i = 0; i < Cfg::kNReg; ++i) acc[i] = 0.0f;
  int prev_s = 0;
  // stage 0 (nothing before it), then pairs (p1, p0), then the last group.
  promoted_step<Cfg, false>(acc, p0, p1, smem_a, smem_b, full, empty, a_row0, s, phase, prev_s, lane);
  int k = 1;
  for (; k + 1 < k_iters; k += 2) {
    promoted_step<Cfg, true>(acc, p1, p0, smem_a, smem_b, full, empty, a_row0, s, phase, prev_s, lane);
    promoted_step<Cfg, true>(acc, p0, p1, smem_a, smem_b, full, empty, a_row0, s, phase, prev_s, lane);
  }
  if (k < k_iters) {  // an even number of stages: the last goes into p1
    promoted_step<Cfg, true>(acc, p1, p0, smem_a, smem_b, full, empty, a_row0, s, phase, prev_s, lane);
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(p1);
    if (lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);
    add_into(acc, p1);
  } else {  // odd: the last is in p0
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(p0);
    if (lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);
    add_into(acc, p0);
  }
}

// Rows of this thread for a 64-row half starting at tc.wg_row0.
__device__ __forceinline__ void set_rows(const epi::TileCtx& tc, epi::EpiState& st, int warp, int lane) {
  st.frow[0] = tc.wg_row0 + warp * 16 + lane / 4;
  st.frow[1] = st.frow[0] + 8;
#pragma unroll
  for (int it = 0; it < 4; ++it) st.prow[it] = tc.wg_row0 + it * 16 + tc.tid / 8;
}

// The epilogue of one 64-row half (epilogue/epilogue.cuh has the two passes).
template <class Cfg, class Epi>
__device__ __forceinline__ void epilogue_half(const typename Epi::Params& params, const epi::TileCtx& tc,
                                              float (&acc)[Cfg::kNReg], epi::EpiState& st, float* stage,
                                              int warp, int lane) {
  using Smem = GemmSmem<Cfg>;
  const epi::FragCoord fc{2 * (lane % 4)};
  Epi::tile_begin(params, tc, st);
  Epi::fragment(params, tc, fc, acc, st);
  // Piece pass: chunks of 32 columns staged through smem as FP32.
#pragma unroll
  for (int c = 0; c < Cfg::BN / 32; ++c) {
    Epi::chunk_begin(params, tc, c, st);
    ptx::bar_sync(tc.bar_id, 128);  // the previous chunk's reads are done
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int j = 4 * c + jj;
      const int r = warp * 16 + lane / 4, col = 8 * jj + fc.col0;
      *reinterpret_cast<float2*>(stage + r * Smem::kStageLd + col) =
          make_float2(acc[4 * j + 0], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(stage + (r + 8) * Smem::kStageLd + col) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    ptx::bar_sync(tc.bar_id, 128);
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      const int lr = it * 16 + tc.tid / 8, lc = (tc.tid % 8) * 4;
      const float4 q = *reinterpret_cast<const float4*>(stage + lr * Smem::kStageLd + lc);
      float v[4] = {q.x, q.y, q.z, q.w};
      const int row = st.prow[it], col = tc.n0 + c * 32 + lc;
      if (row < tc.M && col < tc.N) Epi::piece(params, tc, c, it, row, col, v, st);
    }
  }
  Epi::tile_end(params, tc, st);
}

}  // namespace sm90_gemm

template <class Cfg, class Epi>
__global__ void __launch_bounds__(kGemmThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                     int M, int N, int K, int group_m, const __grid_constant__ typename Epi::Params params) {
  // ---------------------------------------------------------------- constraints
  using Smem = GemmSmem<Cfg>;
  static_assert(Cfg::BM == 128, "BM must be 128: two 64-row WGMMA halves");
  static_assert(Cfg::BN == 128 || Cfg::BN == 256, "BN must be 128 or 256 (WGMMA n128/n256)");
  static_assert(!Cfg::kPingPong || Cfg::BN == 128, "ping-pong holds 128 x BN per warpgroup: BN = 128");
  static_assert(Cfg::STAGES >= 2 && Cfg::STAGES <= 8, "2..8 pipeline stages");
  static_assert(Cfg::kKBytes == 128, "a stage row is exactly one 128-byte swizzle row");
  static_assert(Smem::kABytes % 1024 == 0 && Smem::kBBytes % 1024 == 0,
                "stage buffers must keep 1024-byte alignment (128B swizzle atom)");
  static_assert(Smem::kDynamic <= 232448, "exceeds the 227 KB shared memory of an sm_90 block");
  static_assert(kProducerRegs * 128 + 2 * kConsumerRegs * 128 <= 65536, "register file overflow");

  // ---------------------------------------------------------------- shared memory
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  auto smem_a = [&](int s) { return smem + Smem::kAOff + s * Smem::kABytes; };
  auto smem_b = [&](int s) { return smem + Smem::kBOff + s * Smem::kBBytes; };
  float* staging = reinterpret_cast<float*>(smem + Smem::kStagingOff);
  float* colvec = reinterpret_cast<float*>(smem + Smem::kColVecOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Smem::kBarOff);
  uint64_t* empty = full + Cfg::STAGES;
  uint64_t* order = empty + Cfg::STAGES;  // ping-pong: order[w] = "the other warpgroup's main loop is done"

  // ---------------------------------------------------------------- barriers
  // empty[s] completes when every warp that reads stage s has released it:
  // 8 warps (cooperative: both warpgroups read every stage) or 4 (ping-pong).
  constexpr uint32_t kReleasingWarps = Cfg::kPingPong ? 4 : 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kReleasingWarps);
    }
    ptx::mbarrier_init(&order[0], 4);
    ptx::mbarrier_init(&order[1], 4);
    ptx::fence_mbarrier_init_release_cluster();
    ptx::prefetch_tensormap(&tmap_a);
    ptx::prefetch_tensormap(&tmap_b);
  }
  __syncthreads();

  const TileScheduler sched{(M + Cfg::BM - 1) / Cfg::BM, (N + Cfg::BN - 1) / Cfg::BN, group_m};
  const int k_iters = (K + Cfg::kKElems - 1) / Cfg::kKElems;
  const int wg = threadIdx.x / 128;

  if (wg == 0) {
    // -------------------------------------------------------------- producer
    // Loads every tile of this CTA in order; in ping-pong the stages of tile i
    // are read by consumer warpgroup i % 2, in cooperative mode by both.
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      int s = 0;
      uint32_t phase = 0;
      for (int t = blockIdx.x; t < sched.num_tiles(); t += gridDim.x) {
        int mt, nt;
        sched.coords(t, mt, nt);
        for (int k = 0; k < k_iters; ++k) {
          ptx::mbarrier_wait_parity(&empty[s], phase ^ 1);
          ptx::mbarrier_arrive_expect_tx(&full[s], Smem::kABytes + Smem::kBBytes);
          ptx::cp_async_bulk_tensor_2d_g2s(smem_a(s), &tmap_a, k * Cfg::kKElems, mt * Cfg::BM, &full[s]);
          ptx::cp_async_bulk_tensor_2d_g2s(smem_b(s), &tmap_b, k * Cfg::kKElems, nt * Cfg::BN, &full[s]);
          if (++s == Cfg::STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // -------------------------------------------------------------- consumers
    ptx::setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;  // consumer warpgroup 0 or 1
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    constexpr int H = Cfg::kHalves;
    float acc[H][Cfg::kNReg];
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int i = 0; i < Cfg::kNReg; ++i) acc[h][i] = 0.0f;
    epi::EpiState st[H] = {};
    float* stage = staging + cw * (Smem::kStageBytes / 4);
    epi::TileCtx tc{0, 0, M, N, Cfg::BN, tid, 0, 1 + cw, colvec + cw * Cfg::BN};
#pragma unroll
    for (int h = 0; h < H; ++h) Epi::begin(params, tc, st[h]);

    // Cooperative: every tile, rows [64 cw, 64 cw + 64). Ping-pong: every other
    // tile (local index i = cw, cw + 2, ...), all 128 rows as two halves, and
    // the main loops strictly alternate between the warpgroups (order[]):
    // NOTE: a warpgroup may only wait on a stage's full barrier once the fill
    // before it in that slot has completed; otherwise the parity test matches
    // an older phase (the ring wraps k_iters / STAGES times per tile). Waiting
    // for the other warpgroup's previous main loop guarantees it, and it also
    // gives the tensor cores to one warpgroup while the other runs its epilogue.
    const int first = Cfg::kPingPong ? cw : 0, step = Cfg::kPingPong ? 2 : 1;
    int i = first;
    uint32_t order_phase = 0;
    for (int t = blockIdx.x + first * gridDim.x; t < sched.num_tiles(); t += step * gridDim.x, i += step) {
      int mt, nt;
      sched.coords(t, mt, nt);
      tc.m0 = mt * Cfg::BM;
      tc.n0 = nt * Cfg::BN;
#pragma unroll
      for (int h = 0; h < H; ++h) {
        tc.wg_row0 = tc.m0 + (Cfg::kPingPong ? 64 * h : 64 * cw);
        sm90_gemm::set_rows(tc, st[h], warp, lane);
        Epi::prefetch(params, tc, st[h]);  // epilogue loads in flight during the main loop
      }

      // ---- main loop: 4 WGMMAs per stage and half, one group in flight
      // The ring position of this tile's first stage: i tiles of k_iters before it.
      const long long first_stage = (long long)i * k_iters;
      int s = int(first_stage % Cfg::STAGES);
      uint32_t phase = uint32_t((first_stage / Cfg::STAGES) & 1);
      if constexpr (Cfg::kPingPong) {
        if (i > 0) {  // wait for the other warpgroup's main loop of tile i - 1
          ptx::mbarrier_wait_parity(&order[cw], order_phase);
          order_phase ^= 1;
        }
      }
      int prev_s = 0;
      if constexpr (Cfg::kPromote) {
        sm90_gemm::mainloop_promoted<Cfg>(acc[0], smem_a, smem_b, full, empty, k_iters, 64 * cw, s, phase,
                                          lane);
      } else {
        for (int k = 0; k < k_iters; ++k) {
          ptx::mbarrier_wait_parity(&full[s], phase);
          if constexpr (Cfg::kPingPong) {
            if (k == k_iters - 1) {  // all of this tile's stages observed: let the other one go
              __syncwarp();
              if (lane == 0) ptx::mbarrier_arrive(&order[1 - cw]);
            }
          }
#pragma unroll
          for (int h = 0; h < H; ++h) ptx::fence_operands(acc[h]);
          ptx::wgmma_fence();
#pragma unroll
          for (int h = 0; h < H; ++h) {
            const int a_row0 = Cfg::kPingPong ? 64 * h : 64 * cw;
            sm90_gemm::mma_stage<Cfg>(acc[h], smem_a(s) + a_row0 * Cfg::kKBytes, smem_b(s), k);
          }
          ptx::wgmma_commit_group();
          ptx::wgmma_wait_group<1>();  // the previous stage's group has retired
#pragma unroll
          for (int h = 0; h < H; ++h) ptx::fence_operands(acc[h]);
          if (k > 0 && lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);
          prev_s = s;
          if (++s == Cfg::STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
        ptx::wgmma_wait_group<0>();
#pragma unroll
        for (int h = 0; h < H; ++h) ptx::fence_operands(acc[h]);
        if (lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);
      }  // fast accumulation

      // ---------------------------------------------------------- epilogue
#pragma unroll
      for (int h = 0; h < H; ++h) {
        tc.wg_row0 = tc.m0 + (Cfg::kPingPong ? 64 * h : 64 * cw);
        sm90_gemm::epilogue_half<Cfg, Epi>(params, tc, acc[h], st[h], stage, warp, lane);
      }
    }
#pragma unroll
    for (int h = 0; h < H; ++h) Epi::finish(params, st[h]);
  }
}

}  // namespace futr::device
