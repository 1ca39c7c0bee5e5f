// Internal: the seam between the host launcher (fp8_gemm.cpp: validation,
// heuristic, tensor maps) and the .cu files that instantiate the kernel
// variants (fp8_gemm_<policy>.cu). Not part of the public interface.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "launch/fp8_gemm.h"

namespace futr::cuda::detail {

struct GemmLaunch {
  CUtensorMap ta;  // A [M, K], box [bm, 128 bytes]
  CUtensorMap tb;  // B [N, K], box [bn, 128 bytes]
  int M, N, K;     // problem
  int group_m;     // rasterization group
  int grid;        // persistent CTAs
  cudaStream_t stream;
};

// Each dispatches `v` (a row of kGemmVariants, launch/fp8_gemm_variants.h) to
// its instantiation; the dispatch is generated from that list
// (fp8_gemm_launch.cuh), so a listed variant is always instantiated.
void launch_scaled_out(const GemmVariant& v, const GemmLaunch& l, const ScaledOutArgs& a);
void launch_residual_sumsq(const GemmVariant& v, const GemmLaunch& l, const ResidualSumSqArgs& a);
void launch_rms_scaled_out(const GemmVariant& v, const GemmLaunch& l, const RmsScaledOutArgs& a);
void launch_swiglu_fp8(const GemmVariant& v, const GemmLaunch& l, const SwiGluFp8Args& a);
void launch_qkv_rope_packed(const GemmVariant& v, const GemmLaunch& l, const QkvRopeArgs& a,
                            const PackedRowMap& rows);
void launch_qkv_rope_padded(const GemmVariant& v, const GemmLaunch& l, const QkvRopeArgs& a,
                            const PaddedRowMap& rows);

}  // namespace futr::cuda::detail
