// Compiled variants of the SwiGluFp8 policy (gate/up projection, delayed-scaling
// FP8 output): the rows of kGemmVariants (launch/fp8_gemm_variants.h) with this
// epilogue.
#include "launch/fp8_gemm_launch.cuh"

namespace futr::cuda::detail {

void launch_swiglu_fp8(const GemmVariant& v, const GemmLaunch& l, const SwiGluFp8Args& a) {
  using Epi = device::epi::SwiGluFp8Out;
  Epi::Params p{};
  set_scales(p, a.scales);
  p.out_fp8 = a.out;
  p.ld_fp8 = a.ld_out;
  p.scale_in = a.scale_in;
  p.amax_out = a.amax_out;
  p.saturation_out = a.saturation_out;
  dispatch<GemmEpilogue::kSwiGluFp8, Epi>(v, l, p);
}

}  // namespace futr::cuda::detail
