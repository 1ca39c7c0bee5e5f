// Compiled variants of the SwiGluFp8 policy (gate/up projection, delayed-scaling
// FP8 output). The full list: fp8_gemm.cpp.
#include "cuda/fp8_gemm_launch.cuh"

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
  if (is_variant(v, GemmInput::kE4M3, 256, 4)) launch_kernel<E4M3_256x4, Epi>(l, p);
  else if (is_variant(v, GemmInput::kE4M3, 128, 6)) launch_kernel<E4M3_128x6, Epi>(l, p);
  else if (is_variant(v, GemmInput::kE4M3, 128, 6, true)) launch_kernel<E4M3_128x6_pp, Epi>(l, p);
  else FUTR_ASSERT(!"SwiGluFp8 variant listed but not instantiated");
}

}  // namespace futr::cuda::detail
