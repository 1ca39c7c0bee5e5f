// The epilogue policies of the FP8 prefill GEMM: each one line, read left to
// right (fragment-pass ops first, then piece-pass ops, sinks last). The
// compiled (policy, tile) variants are listed in src/launch/fp8_gemm.cpp.
//
//   ScaledOut       C = a_s * b_s[n] * (A B^T)                       -> BF16
//   ResidualSumSq   out = residual + C (BF16), sumsq[m] += sum_n out^2  (O, down)
//   RmsScaledOut    C * 1/sqrt(sumsq[m]/hidden + eps)               -> BF16 (folded RMSNorm)
//   SwiGluFp8       silu(g) * u from interleaved (g, u) columns       -> E4M3, amax, saturation
//   QkvRope<Rows>   RoPE(q, k); q -> q_out, k/v -> cache slots         (Packed/PaddedRows)
#pragma once

#include "kernels/epilogue/epilogue.cuh"
#include "kernels/epilogue/qkv_rope.cuh"
#include "kernels/epilogue/scale.cuh"
#include "kernels/epilogue/store.cuh"
#include "kernels/epilogue/swiglu_fp8.cuh"

namespace futr::device::epi {

using ScaledOut = Chain<ColScale, StoreBf16>;
using ResidualSumSq = Chain<ColScale, AddResidual, StoreBf16, RowSumSq>;
using RmsScaledOut = Chain<ColScale, RowRmsFactor, StoreBf16>;
using SwiGluFp8Out = Chain<ColScale, SwiGluFp8>;
template <class Rows>
using QkvRope = Chain<ColScale, QkvRopeKvCache<Rows>>;

}  // namespace futr::device::epi
