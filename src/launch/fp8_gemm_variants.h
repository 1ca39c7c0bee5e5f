// The compiled variants of the FP8 prefill GEMM: THE list, written once.
//
// Everything else derives from kGemmVariants:
//   - the dispatch: fp8_gemm_launch.cuh's dispatch<epilogue, Policy>() walks
//     this table at compile time and instantiates sm90_gemm_kernel for exactly
//     the rows of its epilogue (each fp8_gemm_<policy>.cu compiles only its
//     own policies' rows, so the .cu split keeps CI's compile parallel);
//   - validation and errors: fp8_gemm.cpp accepts a GemmConfig only if it is
//     a row here, and otherwise names the nearest row and every row of that
//     (epilogue, input);
//   - the heuristic (choose_gemm_config) chooses among these rows;
//   - the listing: gemm_variants() (tests sweep it, the benchmark prints it).
// Adding a variant = adding a row (the kernel's static_asserts check the tile).
// Keep the list short: CI compiles every row on two cores.
//
// Tests: tests/kernels/fp8_gemm_test.cpp (Fp8GemmVariants.* need no GPU).
#pragma once

#include <cstddef>

#include "launch/fp8_gemm.h"

namespace futr::cuda {

namespace variant_list {
using E = GemmEpilogue;
using I = GemmInput;
inline constexpr bool kCoop = false, kPingPong = true;

inline constexpr bool kPromoted = true;

// {epilogue, input, bm, bn, stages, pingpong, promoted}
// Promoted rows (the default for E4M3, GemmConfig::fast_accum = false): the
// cooperative 128x128 tile only: its 64 x 128 slice per warpgroup holds two
// stages' WGMMA sums (one in flight, one being added) and the FP32 sum in
// 3 x 64 registers per thread (a 128x256 or ping-pong tile would need 384, more
// than the 232 a consumer has). The
// other E4M3 rows keep the whole sum in the WGMMA accumulator (fast accumulation).
inline constexpr GemmVariant kGemmVariants[] = {
    // clang-format off
    {E::kScaledOut,     I::kE4M3, 128, 128, 6, kCoop, kPromoted},
    {E::kResidualSumSq, I::kE4M3, 128, 128, 6, kCoop, kPromoted},
    {E::kRmsScaledOut,  I::kE4M3, 128, 128, 6, kCoop, kPromoted},
    {E::kSwiGluFp8,     I::kE4M3, 128, 128, 6, kCoop, kPromoted},
    {E::kQkvRopePacked, I::kE4M3, 128, 128, 6, kCoop, kPromoted},
    {E::kQkvRopePadded, I::kE4M3, 128, 128, 6, kCoop, kPromoted},
    // fast accumulation (GemmConfig::fast_accum) and the BF16 path:
    {E::kScaledOut,     I::kE4M3, 128, 256, 4, kCoop},      // the paper's configuration
    {E::kScaledOut,     I::kE4M3, 128, 128, 6, kCoop},      // small M x N: twice the CTAs
    {E::kScaledOut,     I::kE4M3, 128, 128, 6, kPingPong},  // epilogue overlapped with MMAs
    {E::kScaledOut,     I::kBF16, 128, 256, 4, kCoop},      // BF16 comparison path
    {E::kResidualSumSq, I::kE4M3, 128, 256, 4, kCoop},      // O / down
    {E::kResidualSumSq, I::kE4M3, 128, 128, 6, kCoop},
    {E::kResidualSumSq, I::kE4M3, 128, 128, 6, kPingPong},
    {E::kRmsScaledOut,  I::kE4M3, 128, 256, 4, kCoop},      // folded RMSNorm
    {E::kSwiGluFp8,     I::kE4M3, 128, 256, 4, kCoop},      // gate/up
    {E::kSwiGluFp8,     I::kE4M3, 128, 128, 6, kCoop},
    {E::kSwiGluFp8,     I::kE4M3, 128, 128, 6, kPingPong},
    {E::kQkvRopePacked, I::kE4M3, 128, 256, 4, kCoop},      // QKV, packed rows
    {E::kQkvRopePadded, I::kE4M3, 128, 256, 4, kCoop},      // QKV, padded rows
    // clang-format on
};
}  // namespace variant_list
using variant_list::kGemmVariants;

inline constexpr size_t kNumGemmVariants = sizeof(kGemmVariants) / sizeof(kGemmVariants[0]);

// Each row once (a duplicate is dead weight and usually hides a typo in the row meant).
constexpr bool gemm_variants_unique() {
  for (size_t i = 0; i < kNumGemmVariants; ++i)
    for (size_t j = i + 1; j < kNumGemmVariants; ++j)
      if (kGemmVariants[i] == kGemmVariants[j]) return false;
  return true;
}
static_assert(gemm_variants_unique(), "kGemmVariants: a variant is listed twice");

}  // namespace futr::cuda
