// INT4 weight quantization into the decode format (quant/int4_pack.h's
// logical form Int4Weights): the group/scale code every INT4 quantizer shares
// (RTN, the clipping search, GPTQ in quant/gptq.h).
//
// Format (docs/QUANTIZATION.md "INT4 weights"): symmetric, per output channel n
// and group g of G consecutive inputs
//     W[n, k] ~= s[n, g] * q[n, k],   q in [-8, 7],   g = k / G,
// s stored as FP16. G = 128 when K % 128 == 0, else 64 (SmolLM2's K = 576).
//
// Scale of a group. With a clipping ratio c in (0, 1] applied to the group's
// largest magnitude a = max_k |w_k|:
//     s = fp16( 2 c a / 15 )                    (the symmetric 16-level grid
//                                                centred at -0.5: -8 s .. 7 s)
//     q = clamp( rne(w / s), -8, 7 )
// c = 1 is round-to-nearest (RTN): the extreme value lands on 7.5 s (rounded to
// +-8, clamped to 7 for a positive extreme), so every weight is within s/2 of
// its grid point. The scale is rounded to FP16 FIRST and q is computed with the
// rounded scale, so dequantization (q * s16, exact in FP32: 4 x 11 bits) is
// exactly what the quantizer optimized. A group whose FP16 scale rounds to 0
// (all |w| < ~4e-8) stores s = 0, q = 0.
//
// Clipping search (beyond RTN, same format): per group, try c on a grid
// c_j = 1 - j * (1 - c_min) / steps, j = 0..steps, and keep the c with the
// smallest weighted squared error  sum_k d_k (w_k - s q_k)^2  (d_k = 1: plain
// MSE; d_k = H_kk = E[x_k^2]: the output-error-weighted variant, used when
// calibration statistics are known). c = 1 is always a candidate, so the
// search is never worse than RTN on its own objective.
//
// Tests: tests/quant/int4_quant_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "quant/int4_pack.h"

namespace futr::quant {

// 128 if k % 128 == 0, else 64 if k % 64 == 0; futr::Error naming `what` otherwise.
int int4_group_for(int k, const std::string& what);

struct ClipSearch {
  bool enabled = false;  // false: RTN (c = 1)
  int steps = 40;        // grid points after c = 1
  float c_min = 0.55f;   // smallest clipping ratio tried
};

// FP16 bits of the scale of a group with largest magnitude `amax`, clipped by c.
uint16_t int4_scale_fp16(float amax, float c);

// q = clamp(rne(w / s), -8, 7) with s the (FP16-decoded) scale; 0 when s == 0.
int8_t int4_quantize_value(float w, float s);

// Quantizes one group of `w` (w.size() values, weights d or empty for d = 1)
// and returns the FP16 scale bits; q receives the values. With clip.enabled the
// scale comes from the clipping search, else from RTN.
uint16_t int4_quantize_group(std::span<const float> w, std::span<const float> d, const ClipSearch& clip,
                             std::span<int8_t> q);

// Quantizes a whole weight matrix W [n, k] row-major with group `group` (0:
// int4_group_for(k)). `diag` (optional, [k]) weights the clipping search's
// error per input (e.g. E[x_k^2] from calibration). Rows in parallel (OpenMP).
Int4Weights quantize_int4(std::span<const float> w, int n, int k, int group, const ClipSearch& clip,
                          std::span<const float> diag = {}, const std::string& name = "weight");

// W~[n, k] = q * s as FP32, row-major (exact products).
std::vector<float> dequantize_int4(const Int4Weights& w);

// sum over all weights of (W - W~)^2, weighted per input by diag (optional).
double int4_squared_error(std::span<const float> w, const Int4Weights& q, std::span<const float> diag = {});

}  // namespace futr::quant
