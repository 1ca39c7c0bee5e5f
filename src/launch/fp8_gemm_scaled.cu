// Compiled variants of the ScaledOut and RmsScaledOut policies (plain GEMM with
// BF16 output; folded-RMSNorm row factor): the rows of kGemmVariants
// (launch/fp8_gemm_variants.h) with these epilogues.
#include "launch/fp8_gemm_launch.cuh"

namespace futr::cuda::detail {

void launch_scaled_out(const GemmVariant& v, const GemmLaunch& l, const ScaledOutArgs& a) {
  using Epi = device::epi::ScaledOut;
  Epi::Params p{};
  set_scales(p, a.scales);
  p.out = a.out;
  p.ld_out = a.ld_out;
  dispatch<GemmEpilogue::kScaledOut, Epi>(v, l, p);
}

void launch_rms_scaled_out(const GemmVariant& v, const GemmLaunch& l, const RmsScaledOutArgs& a) {
  using Epi = device::epi::RmsScaledOut;
  Epi::Params p{};
  set_scales(p, a.scales);
  p.rms_sumsq = a.row_sumsq;
  p.rms_inv_hidden = 1.0f / float(a.hidden);
  p.rms_eps = a.eps;
  p.out = a.out;
  p.ld_out = a.ld_out;
  dispatch<GemmEpilogue::kRmsScaledOut, Epi>(v, l, p);
}

}  // namespace futr::cuda::detail
