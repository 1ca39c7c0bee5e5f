// The compiled variants of the decode GEMMs: one row per kernel instantiation,
// the table w4a16.cu searches (internal to src/launch/w4a16.cu and
// dev/launch/w4a16_dev.cu).
//
// Which weight formats are compiled is a build option (FUTR_W4A16_VARIANTS in
// src/launch/CMakeLists.txt: every format by default, fewer for a quicker
// development build); a row whose format is left out has fn == nullptr and is
// skipped, so a request for it fails naming the nearest compiled variant.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/sm90_w4a16_gemv.cuh"
#include "kernels/sm90_w4a16_skinny.cuh"
#include "launch/w4a16.h"

#ifndef FUTR_W4A16_INT4_G128
#define FUTR_W4A16_INT4_G128 1
#endif
#ifndef FUTR_W4A16_INT4_G64
#define FUTR_W4A16_INT4_G64 1
#endif
#ifndef FUTR_W4A16_E4M3
#define FUTR_W4A16_E4M3 1
#endif

namespace futr::cuda::w4a16 {

// Whether this build compiles the variants of a weight format: INT4 group 128
// or 64, or E4M3 (group 0).
constexpr bool format_compiled(int group) {
  return group == 128  ? FUTR_W4A16_INT4_G128 != 0
         : group == 64 ? FUTR_W4A16_INT4_G64 != 0
                       : FUTR_W4A16_E4M3 != 0;
}

inline constexpr int kThreads = 256;  // gemv, skinny and sk: 8 warps

// a, b = (tn, loads) for gemv, (mt, tn) for skinny and stream, (batches, loads) for sk.
struct Variant {
  DecodeWeights format;
  int group;  // 64 / 128 for INT4, 0 for E4M3
  DecodeKernel kernel;
  int a, b;
  const void* fn;  // the kernel; nullptr when its format is not compiled
  size_t smem;     // dynamic shared memory (skinny: cp.async rings; stream: the bulk-copy ring)
  int threads;     // CTA size
  int min_blocks;  // __launch_bounds__ minimum CTAs per SM (what the heuristic plans with)
  // sk only: dynamic shared memory of a CTA of M rows staging `chunks` k64 chunks.
  size_t (*chunk_smem)(int m, int chunks) = nullptr;
};

// The kernel of a row, instantiated only when its format is compiled.
template <int G, int TM, int U>
const void* gemv_fn() {
  if constexpr (format_compiled(G))
    return reinterpret_cast<const void*>(&device::sm90_w4a16_gemv_kernel<G, TM, U>);
  else return nullptr;
}
template <class WF, int G, int MT, int TN>
const void* skinny_fn() {
  if constexpr (format_compiled(G))
    return reinterpret_cast<const void*>(&device::sm90_w4a16_skinny_kernel<WF, MT, TN>);
  else return nullptr;
}

// The gemv (M = 1..8) and skinny (M = 2..32) rows.
#define FUTR_GEMV(G, TM, U)                                                                           \
  ::futr::cuda::w4a16::Variant {                                                                      \
    DecodeWeights::kInt4, G, DecodeKernel::kGemv, TM, U, ::futr::cuda::w4a16::gemv_fn<G, TM, U>(), 0, \
        ::futr::cuda::w4a16::kThreads, TM == 1 ? 4 : 2                                                \
  }
#define FUTR_SKINNY(WF, FMT, G, MT, TN)                                                                    \
  ::futr::cuda::w4a16::Variant {                                                                           \
    DecodeWeights::FMT, G, DecodeKernel::kSkinny, MT, TN, ::futr::cuda::w4a16::skinny_fn<WF, G, MT, TN>(), \
        device::skinny_smem_bytes<WF, TN, MT>(), ::futr::cuda::w4a16::kThreads, 2                          \
  }
#define FUTR_SKINNY4(G, MT, TN) FUTR_SKINNY(device::Int4Format<G>, kInt4, G, MT, TN)
#define FUTR_SKINNY8(MT, TN) FUTR_SKINNY(device::E4M3Format, kE4M3, 0, MT, TN)

// One decode GEMM launch of at most 32 rows as decode_gemm makes it: the
// kernel's parameters, its grid (one CTA per unit: column groups x K splits,
// or the stream kernels' CTAs), its variant and its dynamic shared memory. The
// launch executor launches it; a persistent executor runs its units
// (launch/persistent_step.cu).
struct DecodeLaunch {
  device::DecodeParams p;
  dim3 grid;
  const Variant* variant;
  size_t smem;  // dynamic shared memory bytes
};
DecodeLaunch decode_launch(DecodeWeights f, const DecodeArgs& a, const DecodeConfig& c);

// The variants of dev/ (built with -DFUTR_DEV=ON: the stream and sk kernels and
// the tile shapes the heuristic never picks, dev/launch/w4a16_dev.cu); empty
// otherwise.
std::span<const Variant> dev_variants();

}  // namespace futr::cuda::w4a16
