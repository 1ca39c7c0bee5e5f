// Compiled variants of the ResidualSumSq policy (O and down projections): the
// rows of kGemmVariants (launch/fp8_gemm_variants.h) with this epilogue.
#include "launch/fp8_gemm_launch.cuh"

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
  dispatch<GemmEpilogue::kResidualSumSq, Epi>(v, l, p);
}

}  // namespace futr::cuda::detail
