// RoPE frequencies: the one home of the spec, used by the CPU forward
// (cpu_engine/ops.h apply_rope) and the GPU engine (sm90_rope) through the cos/sin
// table below, the FP8 GEMM's QKV epilogue and its reference
// (reference/fp8_gemm_ref.h; the GPU takes these values rounded to FP32) and
// the GGUF reader (rope_freqs.weight holds rope_freq_factors()).
//
// Inverse frequency of pair i < D/2 (head_dim D, base theta):
//   f_i = theta^(-2i/D)
// Llama-3 scaling ("llama3", RopeScaling in model/config.h) slows the low
// frequencies to extend the context by `factor`, using the wavelength
// lambda_i = 2 pi / f_i and the original context L0:
//   lambda_high = L0 / high_freq_factor,   lambda_low = L0 / low_freq_factor
//   lambda_i < lambda_high  (high frequency):  f_i unchanged
//   lambda_i > lambda_low   (low frequency):   f_i / factor
//   otherwise, with s = (L0 / lambda_i - low_freq_factor)
//                       / (high_freq_factor - low_freq_factor):
//                                              (1 - s) * f_i / factor + s * f_i
// Everything in double.
//
// Tests: tests/cpu_engine/ops_test.cpp (against an independent transcription of the
// definition), tests/formats/gguf_test.cpp (the rope_freqs.weight round trip).
#pragma once

#include <vector>

#include "model/config.h"

namespace futr {

// f_i for i < head_dim / 2; futr::Error for an odd head_dim, an unknown
// scaling type or invalid llama3 parameters.
std::vector<double> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling);

// The divisor of each frequency, theta^(-2i/D) / f_i (1 where unscaled): what
// llama.cpp stores as rope_freqs.weight for llama3 scaling.
std::vector<double> rope_freq_factors(int head_dim, float theta, const RopeScaling& scaling);

// The cos/sin table of positions [0, max_pos): the angles pos * f_i and their
// cos/sin computed in double, then rounded to FP32 once.
struct RopeTable {
  int head_dim = 0;        // D
  int max_pos = 0;         // positions [0, max_pos) are tabulated
  std::vector<float> cos;  // [max_pos, D/2] cos(pos * f_i)
  std::vector<float> sin;  // [max_pos, D/2] sin(pos * f_i)
};
RopeTable make_rope_table(int head_dim, float theta, const RopeScaling& scaling, int max_pos);

}  // namespace futr
