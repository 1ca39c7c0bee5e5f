// The device parameters of the decode path's small kernels, made from their
// launchers' arguments (launch/decode_ops.h) and checked: one home for the
// launch executor's launchers (decode_ops.cu) and the persistent executor
// (persistent_step.cu).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/sm90_rmsnorm.cuh"
#include "kernels/sm90_swiglu.cuh"
#include "launch/decode_ops.h"

namespace futr::cuda {

inline device::RmsNormParams rmsnorm_params(const RmsNormArgs& a) {
  FUTR_CHECK(a.H >= 4 && a.H <= device::kRmsThreads * device::kRmsMaxPerThread && a.H % 4 == 0,
             "RMSNorm: hidden size {} out of range (a multiple of 4 in 4..{})", a.H,
             device::kRmsThreads * device::kRmsMaxPerThread);
  FUTR_CHECK(a.x && a.gain && a.out && (!a.tokens || a.embd), "RMSNorm: a pointer is null");
  device::RmsNormParams p;
  p.x = a.x;
  p.add = static_cast<const uint16_t*>(a.add);
  p.ld_add = a.ld_add;
  p.tokens = a.tokens;
  p.embd = static_cast<const uint16_t*>(a.embd);
  p.gain = static_cast<const uint16_t*>(a.gain);
  p.out = static_cast<uint16_t*>(a.out);
  p.H = a.H;
  p.eps = a.eps;
  return p;
}

// SwiGLU of `rows` rows of [gate | up] (2I wide) into [rows][I].
inline device::SwigluParams swiglu_params(const void* gu, void* out, int rows, int I) {
  FUTR_CHECK(gu && out && rows >= 0 && I >= 1, "SwiGLU: {} rows of {}", rows, I);
  return device::SwigluParams{static_cast<const uint16_t*>(gu), static_cast<uint16_t*>(out), rows, I};
}

// The SwiGLU's units: one per 256 elements, at most 4096 (a grid-stride loop beyond).
inline int swiglu_units(int rows, int I) {
  const long n = long(rows) * I;
  return int(std::min<long>((n + 255) / 256, 4096));
}

}  // namespace futr::cuda
