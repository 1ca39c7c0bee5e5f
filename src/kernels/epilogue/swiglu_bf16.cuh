// The decode path's SwiGLU value with its BF16 rounding, one definition for
// the two places that compute it: the sm90_swiglu kernel and the gemv's fused
// input staging (sm90_w4a16_gemv.cuh, DecodeParams::x_swiglu), so the fused
// path gives the same bits as the separate kernel.
//
//   swiglu_bf16(g, u) = bf16_rn(g / (1 + exp(-g)) * u)        (FP32 in between)
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace futr::device {

// BF16 bit patterns in and out.
__device__ __forceinline__ uint16_t swiglu_bf16(uint16_t gate, uint16_t up) {
  const float g = __uint_as_float(uint32_t(gate) << 16), u = __uint_as_float(uint32_t(up) << 16);
  const __nv_bfloat16 o = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
  return *reinterpret_cast<const uint16_t*>(&o);
}

}  // namespace futr::device
