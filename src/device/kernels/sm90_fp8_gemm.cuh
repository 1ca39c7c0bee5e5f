// sm90_fp8_gemm: persistent, warp-specialized TMA + WGMMA GEMM for Hopper (sm_90a)
// with a compile-time epilogue policy.
//
//   C[M, N] = A[M, K] x B[N, K]^T,  FP32 accumulation, then Epi (epilogue/policies.cuh)
//
// Inputs: E4M3 (QGMMA, k32 per instruction) or BF16 (HGMMA, k16), both K-major
// ("TN": A row-major activations, B row-major [N, K] weights). The smem layout
// and descriptor contract are in device/ptx/wgmma.cuh.
//
// Structure (384 threads, one CTA per SM, grid = min(tiles, SMs)):
//   warpgroup 0      producer: one thread issues TMA copies of A (BM x 128 B)
//                    and B (BN x 128 B) per K step into a STAGES-deep smem ring;
//                    gives registers back (setmaxnreg.dec).
//   warpgroups 1, 2  consumers: each owns 64 rows of the BM = 128 row tile and
//                    the full BN columns (64 x BN FP32 accumulator = BN/2
//                    registers per thread), issues 4 WGMMAs per stage, then
//                    runs the epilogue (fragment pass in registers, piece pass
//                    through a per-warpgroup smem staging buffer).
//   Both roles walk the same tile sequence (TileScheduler: static persistent
//   striding over tiles, grouped rasterization for L2 reuse).
// Pipeline: full[s] (TMA bytes landed) and empty[s] (8 consumer warps done)
// mbarriers per stage (device/ptx/mbarrier.cuh has the protocol). Consumers
// keep one WGMMA group in flight and release a stage when the next group is
// issued and the previous one retired.
//
// Limits: K % (16 / sizeof(input)) == 0 (TMA row strides are multiples of 16
// bytes), N % 8 == 0; M, N, K tails are zero-filled by TMA and masked in the
// epilogue. The launcher (src/cuda/fp8_gemm.cpp) checks these and the list of
// compiled variants. Test: tests/device/fp8_gemm_test.cpp; benchmark:
// bench/fp8_gemm_bench.cpp; walkthrough: docs/WALKTHROUGH_FP8_GEMM.md.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device/epilogue/epilogue.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/tma.cuh"
#include "device/ptx/wgmma.cuh"

namespace futr::device {

struct E4M3In {
  static constexpr int kBytes = 1;
};
struct BF16In {
  static constexpr int kBytes = 2;
};

// Compile-time tile configuration.
template <int BM_, int BN_, int STAGES_, class In_>
struct GemmTile {
  static constexpr int BM = BM_;          // rows per CTA tile (2 consumer warpgroups x 64)
  static constexpr int BN = BN_;          // columns per CTA tile (WGMMA N)
  static constexpr int STAGES = STAGES_;  // TMA ring depth
  using In = In_;
  static constexpr int kKBytes = 128;                    // K bytes per stage (one 128B swizzle row)
  static constexpr int kKElems = kKBytes / In::kBytes;   // K elements per stage
  static constexpr int kWgmmaPerStage = 4;               // each WGMMA consumes 32 bytes of K
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
  static constexpr int kStageLd = 32 + 8;                  // staging row stride, floats (pad: no bank conflicts)
  static constexpr int kStageBytes = 64 * kStageLd * 4;    // per consumer warpgroup
  static constexpr int kAOff = 0;
  static constexpr int kBOff = kAOff + Cfg::STAGES * kABytes;
  static constexpr int kStagingOff = kBOff + Cfg::STAGES * kBBytes;
  static constexpr int kBarOff = kStagingOff + 2 * kStageBytes;
  static constexpr int kTotal = kBarOff + 2 * Cfg::STAGES * 8;
  static constexpr int kDynamic = kTotal + 1024;  // what the launcher requests
};

inline constexpr int kGemmThreads = 384;
inline constexpr uint32_t kProducerRegs = 40;
inline constexpr uint32_t kConsumerRegs = 232;

template <class Cfg, class Epi>
__global__ void __launch_bounds__(kGemmThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a,
                     const __grid_constant__ CUtensorMap tmap_b, int M, int N, int K, int group_m,
                     const __grid_constant__ typename Epi::Params params) {
  // ---------------------------------------------------------------- constraints
  using Smem = GemmSmem<Cfg>;
  static_assert(Cfg::BM == 128, "BM must be 128: two consumer warpgroups of 64 rows");
  static_assert(Cfg::BN == 128 || Cfg::BN == 256, "BN must be 128 or 256 (WGMMA n128/n256)");
  static_assert(Cfg::STAGES >= 2 && Cfg::STAGES <= 8, "2..8 pipeline stages");
  static_assert(Cfg::kKBytes == 128, "a stage row is exactly one 128-byte swizzle row");
  static_assert(Smem::kABytes % 1024 == 0 && Smem::kBBytes % 1024 == 0,
                "stage buffers must keep 1024-byte alignment (128B swizzle atom)");
  static_assert(Smem::kDynamic <= 232448, "exceeds the 227 KB shared memory of an sm_90 block");
  static_assert(kProducerRegs * 128 + 2 * kConsumerRegs * 128 <= 65536, "register file overflow");
  constexpr int kNReg = Cfg::BN / 2;  // accumulator registers per consumer thread

  // ---------------------------------------------------------------- shared memory
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  auto smem_a = [&](int s) { return smem + Smem::kAOff + s * Smem::kABytes; };
  auto smem_b = [&](int s) { return smem + Smem::kBOff + s * Smem::kBBytes; };
  float* staging = reinterpret_cast<float*>(smem + Smem::kStagingOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Smem::kBarOff);
  uint64_t* empty = full + Cfg::STAGES;

  // ---------------------------------------------------------------- barriers
  constexpr uint32_t kConsumerWarps = 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerWarps);
    }
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
          ptx::cp_async_bulk_tensor_2d_g2s(smem_a(s), &tmap_a, k * Cfg::kKElems, mt * Cfg::BM,
                                           &full[s]);
          ptx::cp_async_bulk_tensor_2d_g2s(smem_b(s), &tmap_b, k * Cfg::kKElems, nt * Cfg::BN,
                                           &full[s]);
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
    const int cw = wg - 1;  // consumer warpgroup: rows [64 cw, 64 cw + 64) of the tile
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    float acc[kNReg];
#pragma unroll
    for (int i = 0; i < kNReg; ++i) acc[i] = 0.0f;
    epi::EpiState st{};
    float* stage = staging + cw * (Smem::kStageBytes / 4);
    const epi::FragCoord fc{2 * (lane % 4)};

    int s = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < sched.num_tiles(); t += gridDim.x) {
      int mt, nt;
      sched.coords(t, mt, nt);

      // ---- main loop: 4 WGMMAs per stage, one group in flight
      int prev_s = 0;
      for (int k = 0; k < k_iters; ++k) {
        ptx::mbarrier_wait_parity(&full[s], phase);
        ptx::fence_operands(acc);
        ptx::wgmma_fence();
        const uint8_t* a_tile = smem_a(s) + cw * 64 * Cfg::kKBytes;
        const uint8_t* b_tile = smem_b(s);
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
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<1>();  // the previous stage's group has retired
        ptx::fence_operands(acc);
        if (k > 0 && lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);
        prev_s = s;
        if (++s == Cfg::STAGES) {
          s = 0;
          phase ^= 1;
        }
      }
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(acc);
      if (lane == 0) ptx::mbarrier_arrive(&empty[prev_s]);

      // ---------------------------------------------------------- epilogue
      const epi::TileCtx tc{mt * Cfg::BM, nt * Cfg::BN, M, N};
      const int wg_row0 = tc.m0 + cw * 64;
      st.frow[0] = wg_row0 + warp * 16 + lane / 4;
      st.frow[1] = st.frow[0] + 8;
#pragma unroll
      for (int it = 0; it < 4; ++it) st.prow[it] = wg_row0 + it * 16 + tid / 8;
      Epi::tile_begin(params, tc, st);
      Epi::fragment(params, tc, fc, acc, st);

      // Piece pass: chunks of 32 columns staged through smem as FP32.
#pragma unroll
      for (int c = 0; c < Cfg::BN / 32; ++c) {
        ptx::bar_sync(1 + cw, 128);  // the previous chunk's reads are done
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * c + jj;
          const int r = warp * 16 + lane / 4, col = 8 * jj + fc.col0;
          *reinterpret_cast<float2*>(stage + r * Smem::kStageLd + col) =
              make_float2(acc[4 * j + 0], acc[4 * j + 1]);
          *reinterpret_cast<float2*>(stage + (r + 8) * Smem::kStageLd + col) =
              make_float2(acc[4 * j + 2], acc[4 * j + 3]);
        }
        ptx::bar_sync(1 + cw, 128);
#pragma unroll
        for (int it = 0; it < 4; ++it) {
          const int lr = it * 16 + tid / 8, lc = (tid % 8) * 4;
          const float4 q = *reinterpret_cast<const float4*>(stage + lr * Smem::kStageLd + lc);
          float v[4] = {q.x, q.y, q.z, q.w};
          const int row = st.prow[it], col = tc.n0 + c * 32 + lc;
          if (row < M && col < N) Epi::piece(params, tc, it, row, col, v, st);
        }
      }
      Epi::tile_end(params, tc, st);
    }
    Epi::finish(params, st);
  }
}

}  // namespace futr::device
