// CPU reference of the FP8 activation quantizer of the prefill path (the
// specification src/kernels/sm90_fp8_quantize.cuh is tested against):
// the arithmetic of cpu::Fp8Linear::quantize_input (variant rms_in_cast for
// fold = true) on rows of BF16 bits, returning the E4M3 bytes and the call's
// record (amax of the finite values, saturated and non-finite counts). The
// state machine that consumes the record is quant::DelayedScale itself.
#pragma once

#include <cstdint>
#include <vector>

namespace futr::ref {

struct Fp8QuantizeResult {
  std::vector<uint8_t> q;  // [rows][K] E4M3
  std::vector<float> r;    // [rows] row factors (fold), else empty
  float amax = 0.0f;       // max |y| over the finite values
  uint64_t saturated = 0;  // |y / s| > 448
  uint64_t nonfinite = 0;  // y not finite
};

// x: [rows][ld] BF16 bits. y = bf16(x * r) with r = 1 / sqrt(sum x^2 / K + eps)
// (the sum in float64) when fold, else y = x; q = e4m3_satfinite(y * (1 / s)).
Fp8QuantizeResult fp8_quantize_rows(const uint16_t* x, int64_t ld, int rows, int K, bool fold, float eps,
                                    float scale);

}  // namespace futr::ref
