// FP8 E4M3 weights of the prefill GEMMs: per-output-channel scales and the
// RMSNorm gain folded into the projections that follow the norm.
//
// Format (docs/QUANTIZATION.md "FP8 weights"): for W [N, K] row-major,
//     b_s[n] = amax_k |W'[n, k]| / 448          (FP32; 1 for an all-zero row)
//     w8[n, k] = e4m3_satfinite( W'[n, k] / b_s[n] )   (RNE)
//     W'[n, k] ~= e4m3_to_float(w8[n, k]) * b_s[n]
// stored [N, K] row-major (the K-major B operand of the FP8 GEMM, src/launch/fp8_gemm.h).
//
// Folded RMSNorm. The projections after an RMSNorm (q, k, v after attn_norm;
// gate, up after ffn_norm) compute RMSNorm(x; g) W^T = r(x) * (x (W diag(g))^T)
// with r(x) = 1 / sqrt(mean(x^2) + eps) a per-row scalar. So W' = W diag(g) is
// quantized (the gain is folded in FP32 before quantization) and the GEMM runs
// on the un-normalized rows x; the epilogue multiplies row m by r(x_m)
// (kernels/epilogue/scale.cuh RowRmsFactor). o and down are not folded (g = 1).
//
// Tests: tests/quant/fp8_weights_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace futr::quant {

// The per-channel scales futr writes and reads (.futr files; the reader names
// the tensor, row and value of one outside): [2^-64, 2^16], i.e. a row's
// largest |W'| = 448 b_s up to ~2.9e7. NOTE: trained weights (with a norm gain
// folded in) are orders of magnitude below that; quantize_fp8() raises the
// scale of a row whose largest value is below 448 * 2^-64 (~2.4e-17) to
// 2^-64 (its values then carry an absolute error of at most 2^-74, half
// E4M3's smallest step at that scale) and refuses a row above the bound,
// naming the tensor.
inline constexpr float kFp8MinWeightScale = 0x1p-64f;
inline constexpr float kFp8MaxWeightScale = 0x1p16f;

struct Fp8Weights {
  int n = 0;                 // output channels N
  int k = 0;                 // inputs K
  std::vector<uint8_t> w;    // [N, K] row-major E4M3 bytes (OCP E4M3FN)
  std::vector<float> scale;  // [N] per-output-channel dequantization scale b_s
  bool folded_gain = false;  // true: W' = W diag(g) (an RMSNorm gain is folded in)

  float dequant(int row, int col) const;  // e4m3(w) * scale[row]
};

// W' = W diag(g): column k of every row multiplied by gain[k] (FP32 products).
std::vector<float> fold_gain(std::span<const float> w, int n, int k, std::span<const float> gain);

// Quantizes W [n, k] row-major (already folded if it should be) per channel.
Fp8Weights quantize_fp8(std::span<const float> w, int n, int k, bool folded_gain,
                        const std::string& name = "weight");

// [n, k] FP32 = e4m3(w) * scale[n] (exact: 4 significant bits x FP32 scale).
std::vector<float> dequantize_fp8(const Fp8Weights& w);

}  // namespace futr::quant
