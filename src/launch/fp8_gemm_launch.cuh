// Internal: launches one instantiation of sm90_gemm_kernel<Cfg, Epi>, and the
// dispatch from a GemmVariant to it, generated from the one variant list
// (launch/fp8_gemm_variants.h). Included only by the fp8_gemm_<policy>.cu files
// (each instantiates the listed variants of its policies).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "kernels/epilogue/policies.cuh"
#include "kernels/sm90_fp8_gemm.cuh"
#include "launch/check.h"
#include "launch/fp8_gemm_launch.h"
#include "launch/fp8_gemm_variants.h"

namespace futr::cuda::detail {

template <class Cfg, class Epi>
void launch_kernel(const GemmLaunch& l, const typename Epi::Params& p) {
  constexpr int smem = device::GemmSmem<Cfg>::kDynamic;
  auto* kernel = &device::sm90_gemm_kernel<Cfg, Epi>;
  static const bool attr_set = [&] {
    FUTR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)attr_set;
  kernel<<<l.grid, device::kGemmThreads, smem, l.stream>>>(l.ta, l.tb, l.M, l.N, l.K, l.group_m, p);
  FUTR_CUDA_CHECK_LAUNCH();
}

template <class P>
void set_scales(P& p, const GemmScales& s) {
  p.a_scale = s.a_scale;
  p.b_scale = s.b_scale;
}

// The kernel tile of row I of kGemmVariants.
template <size_t I>
struct ListedTile {
  static constexpr GemmVariant v = kGemmVariants[I];
  using type =
      device::GemmTile<v.bm, v.bn, v.stages,
                       std::conditional_t<v.input == GemmInput::kE4M3, device::E4M3In, device::BF16In>,
                       v.pingpong ? device::Schedule::kPingPong : device::Schedule::kCooperative, v.promoted>;
};

// Row I, when it is `v` and belongs to epilogue kEpi: launch it (true). Rows
// of other epilogues are discarded at compile time, so each .cu instantiates
// only its own policies' kernels.
template <GemmEpilogue kEpi, class Epi, size_t I>
bool launch_if_listed(const GemmVariant& v, const GemmLaunch& l, const typename Epi::Params& p) {
  constexpr GemmVariant row = kGemmVariants[I];
  if constexpr (row.epilogue != kEpi) {
    return false;
  } else {
    if (!(v == row)) return false;
    launch_kernel<typename ListedTile<I>::type, Epi>(l, p);
    return true;
  }
}

template <GemmEpilogue kEpi, class Epi, size_t... I>
bool launch_listed(const GemmVariant& v, const GemmLaunch& l, const typename Epi::Params& p,
                   std::index_sequence<I...>) {
  return (launch_if_listed<kEpi, Epi, I>(v, l, p) || ...);
}

// Launches `v` (a row of kGemmVariants for epilogue kEpi, checked by
// fp8_gemm.cpp) with the policy Epi: the dispatch derived from the list.
template <GemmEpilogue kEpi, class Epi>
void dispatch(const GemmVariant& v, const GemmLaunch& l, const typename Epi::Params& p) {
  const bool launched = launch_listed<kEpi, Epi>(v, l, p, std::make_index_sequence<kNumGemmVariants>{});
  FUTR_ASSERT(launched && "FP8 GEMM: dispatch of a variant that is not in kGemmVariants");
}

}  // namespace futr::cuda::detail
