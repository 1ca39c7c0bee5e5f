// The decode GEMM variants of dev/: compiled into futr_launch with
// -DFUTR_DEV=ON, found by src/launch/w4a16.cu's launcher like its own rows
// (w4a16::dev_variants()). The heuristic never picks any of them; each was
// measured on the H200 (docs/PERF.md, "What was tried (decode GEMMs)"):
//   - sk: the stream-K gemv (M <= 8), 73.2 us on the 8B layer against 59.3;
//   - stream: the warp-specialised bulk-copy ring, 1.1-1.35x slower;
//   - gemv with two tiles per warp or an 8-chunk ring, skinny with two tiles
//     per warp at M <= 8: faster on a few projections alone, slower in the
//     decode step.
// Requested by kernel=sk / kernel=stream / tn= / loads= (apply_overrides:
// w4a16_bench --config and --sweep, FUTR_DECODE_CONFIG_M8); tested by
// dev/tests/w4a16_dev_test.cpp.
#include "dev/kernels/sm90_w4a16_sk.cuh"
#include "dev/kernels/sm90_w4a16_stream.cuh"
#include "launch/w4a16_variant.cuh"

namespace futr::cuda {

namespace {

using w4a16::Variant;

template <class WF, int G, int MT, int TN>
const void* stream_fn() {
  if constexpr (w4a16::format_compiled(G))
    return reinterpret_cast<const void*>(&device::sm90_w4a16_stream_kernel<WF, MT, TN>);
  else return nullptr;
}
template <int G, int U, int NB>
const void* sk_fn() {
  if constexpr (w4a16::format_compiled(G))
    return reinterpret_cast<const void*>(&device::sm90_w4a16_sk_kernel<G, U, NB>);
  else return nullptr;
}
template <int G>
size_t sk_chunk_smem(int m, int chunks) {
  return device::sk_smem_bytes<G>(m, chunks);
}

#define FUTR_STREAM(WF, FMT, G, MT, TN)                                                                    \
  Variant {                                                                                                \
    DecodeWeights::FMT, G, DecodeKernel::kStream, MT, TN, stream_fn<WF, G, MT, TN>(),                      \
        device::StreamShape<WF, MT, TN>::kSmem, device::StreamShape<WF, MT, TN>::kThreads, MT == 1 ? 3 : 2 \
  }
#define FUTR_STREAM4(G, MT, TN) FUTR_STREAM(device::Int4Format<G>, kInt4, G, MT, TN)
#define FUTR_STREAM8(MT, TN) FUTR_STREAM(device::E4M3Format, kE4M3, 0, MT, TN)
#define FUTR_SK(G, U, NB)                                                                          \
  Variant {                                                                                        \
    DecodeWeights::kInt4, G, DecodeKernel::kStreamK, NB, U, sk_fn<G, U, NB>(), 0, w4a16::kThreads, \
        NB == 1 ? 4 : 3, &sk_chunk_smem<G>                                                         \
  }

const Variant kDevVariants[] = {
    // M = 1..8, INT4: per-lane loads under a stream-K partition (NB batches of U chunks in flight).
    FUTR_SK(128, 2, 1),
    FUTR_SK(128, 4, 1),
    FUTR_SK(64, 2, 1),
    FUTR_SK(64, 4, 1),
    FUTR_SK(128, 4, 2),
    FUTR_SK(64, 4, 2),
    // M = 1..32, both formats: the bulk-copy stream kernel (MT row tiles of 8, TN weight tiles per warp).
    FUTR_STREAM4(128, 1, 1),
    FUTR_STREAM4(128, 2, 1),
    FUTR_STREAM4(128, 4, 1),
    FUTR_STREAM4(128, 4, 2),
    FUTR_STREAM4(128, 1, 2),
    FUTR_STREAM4(128, 2, 2),
    FUTR_STREAM4(64, 1, 1),
    FUTR_STREAM4(64, 2, 1),
    FUTR_STREAM4(64, 4, 1),
    FUTR_STREAM8(1, 1),
    FUTR_STREAM8(2, 1),
    FUTR_STREAM8(4, 1),
    // The gemv and skinny tiles the heuristic does not pick.
    FUTR_GEMV(128, 2, 4),
    FUTR_GEMV(128, 1, 8),
    FUTR_GEMV(64, 2, 4),
    FUTR_SKINNY4(128, 1, 2),
};

}  // namespace

std::span<const Variant> w4a16::dev_variants() { return kDevVariants; }

}  // namespace futr::cuda
