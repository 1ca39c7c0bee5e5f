// CPU reference of the decode step's LM head (the specification
// src/kernels/sm90_lm_head.cuh is tested against):
//
//   out[r][v] = sum_k x[r][k] * W[v][k]      r < m, v < n
//
// x BF16 [m][k] and W BF16 [n][k] row-major (bits); out float [m][ld], the
// sum in float64 over the exact products, rounded once to float. `rows`
// restricts the vocabulary rows computed (for the largest heads); the others
// keep their value.
#pragma once

#include <cstdint>
#include <span>

namespace futr::ref {

void lm_head(std::span<const uint16_t> w, std::span<const uint16_t> x, int m, int n, int k,
             std::span<float> out, int64_t ld, std::span<const int> rows = {});

}  // namespace futr::ref
