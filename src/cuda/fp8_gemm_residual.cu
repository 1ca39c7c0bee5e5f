// Compiled variants of the ResidualSumSq policy (O and down projections). The
// full list: fp8_gemm.cpp.
#include "cuda/fp8_gemm_launch.cuh"

namespace futr::cuda::detail {

void launch_residual_sumsq(const GemmVariant& v, const GemmLaunch& l, const ResidualSumSqArgs& a) {
  using Epi = device::epi::ResidualSumSq;
  Epi::Params p{};
  set_scales(p, a.scales);
  p.residual = a.residual;
  p.ld_res = a.ld_res;
  p.out = a.out;
  p.ld_out = a.ld_out;
  p.row_sumsq = a.row_sumsq;
  if (is_variant(v, GemmInput::kE4M3, 256, 4)) launch_kernel<E4M3_256x4, Epi>(l, p);
  else if (is_variant(v, GemmInput::kE4M3, 128, 6)) launch_kernel<E4M3_128x6, Epi>(l, p);
  else if (is_variant(v, GemmInput::kE4M3, 128, 6, true)) launch_kernel<E4M3_128x6_pp, Epi>(l, p);
  else FUTR_ASSERT(!"ResidualSumSq variant listed but not instantiated");
}

}  // namespace futr::cuda::detail
