// Compiled variants of the ScaledOut and RmsScaledOut policies (plain GEMM with
// BF16 output; folded-RMSNorm row factor). The full list: fp8_gemm.cpp.
#include "cuda/fp8_gemm_launch.cuh"

namespace futr::cuda::detail {

void launch_scaled_out(const GemmVariant& v, const GemmLaunch& l, const ScaledOutArgs& a) {
  using Epi = device::epi::ScaledOut;
  Epi::Params p{};
  set_scales(p, a.scales);
  p.out = a.out;
  p.ld_out = a.ld_out;
  if (is_variant(v, GemmInput::kE4M3, 256, 4)) launch_kernel<E4M3_256x4, Epi>(l, p);
  else if (is_variant(v, GemmInput::kE4M3, 128, 6)) launch_kernel<E4M3_128x6, Epi>(l, p);
  else if (is_variant(v, GemmInput::kE4M3, 128, 6, true)) launch_kernel<E4M3_128x6_pp, Epi>(l, p);
  else if (is_variant(v, GemmInput::kBF16, 256, 4)) launch_kernel<BF16_256x4, Epi>(l, p);
  else FUTR_ASSERT(!"ScaledOut variant listed but not instantiated");
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
  if (is_variant(v, GemmInput::kE4M3, 256, 4)) launch_kernel<E4M3_256x4, Epi>(l, p);
  else FUTR_ASSERT(!"RmsScaledOut variant listed but not instantiated");
}

}  // namespace futr::cuda::detail
