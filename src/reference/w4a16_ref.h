// CPU reference of the decode GEMMs with quantized weights (the specification
// the GPU kernels in src/kernels/sm90_w4a16_*.cuh are tested against):
//
//   W4A16: y[m, n] = sum_g s[n, g] * sum_{k in group g} x[m, k] * q[n, k]
//   W8A16: y[m, n] = s[n] * sum_k x[m, k] * e4m3[n, k]
//
// x is BF16 [M, K] row-major (bits), y float [M, N] (not rounded: the GPU's one
// BF16 rounding of the output is part of the tolerance). Sums in float64, on
// logical (unpacked) weights. `rows` restricts the outputs computed to a subset
// of output channels (for the largest shapes); y keeps the full [M, N] shape and
// untouched entries keep their value.
#pragma once

#include <cstdint>
#include <span>

#include "quant/int4_pack.h"

namespace futr::ref {

// w: logical INT4 weights and FP16 group scales.
void w4a16(const quant::Int4Weights& w, std::span<const uint16_t> x, int m, std::span<float> y,
           std::span<const int> rows = {});

// e4m3: [N, K] row-major E4M3 bytes (logical order), scale: [N] FP32.
void w8a16(int n, int k, std::span<const uint8_t> e4m3, std::span<const float> scale,
           std::span<const uint16_t> x, int m, std::span<float> y, std::span<const int> rows = {});

}  // namespace futr::ref
