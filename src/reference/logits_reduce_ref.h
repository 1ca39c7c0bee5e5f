// CPU reference of the decode step's logits reductions (the specification
// src/kernels/sm90_logits_reduce.cuh is tested against), per row z of
// `vocab` FP32 logits, in float64:
//
//   max       = max_i z_i over the entries that are not NaN (NaN if all are)
//   argmax    = the lowest i with z_i == max (0 if every entry is NaN)
//   lse       = max + log(sum_i exp(z_i - max)); -inf if max == -inf, +inf if
//               max == +inf, NaN if every entry is NaN
//   logprob   = z[target] - lse (-inf when lse == -inf); 0 without a target
//   nonfinite = entries that are NaN or +inf (-inf is a masked id, legal)
//
// runtime::argmax and runtime::token_nll (the host sampler and perplexity)
// agree with it on finite rows: same argmax (lowest id among ties), and
// logprob == -token_nll up to float64 rounding.
#pragma once

#include <cstdint>
#include <span>

namespace futr::ref {

struct LogitsStats {
  double lse = 0;
  double logprob = 0;
  float max = 0;
  int argmax = 0;
  int nonfinite = 0;
};

// target < 0: no log-probability (logprob = 0).
LogitsStats logits_reduce(std::span<const float> z, int target);

}  // namespace futr::ref
