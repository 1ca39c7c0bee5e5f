// Internal: launches one instantiation of sm90_gemm_kernel<Cfg, Epi>. Included
// only by the fp8_gemm_<policy>.cu files (each holds its policy's variants).
#pragma once

#include "cuda/check.h"
#include "cuda/fp8_gemm_launch.h"
#include "device/epilogue/policies.cuh"
#include "device/kernels/sm90_fp8_gemm.cuh"

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

inline bool is_variant(const GemmVariant& v, GemmInput in, int bn, int stages, bool pingpong = false) {
  return v.input == in && v.bm == 128 && v.bn == bn && v.stages == stages && v.pingpong == pingpong;
}

using E4M3_256x4 = device::GemmTile<128, 256, 4, device::E4M3In>;
using E4M3_128x6 = device::GemmTile<128, 128, 6, device::E4M3In>;
using BF16_256x4 = device::GemmTile<128, 256, 4, device::BF16In>;
using E4M3_128x6_pp = device::GemmTile<128, 128, 6, device::E4M3In, device::Schedule::kPingPong>;

}  // namespace futr::cuda::detail
