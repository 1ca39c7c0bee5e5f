// Launchers of the decode path's small kernels (see decode_ops.h).
#include "launch/decode_ops.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/sm90_gather_rows.cuh"
#include "kernels/sm90_logits_reduce.cuh"
#include "kernels/sm90_rmsnorm.cuh"
#include "kernels/sm90_rope.cuh"
#include "kernels/sm90_sample_topk.cuh"
#include "kernels/sm90_swiglu.cuh"
#include "launch/check.h"
#include "launch/decode_ops_params.cuh"
#include "launch/launch.cuh"

namespace futr::cuda {

void rmsnorm(const RmsNormArgs& a, cudaStream_t s, bool pdl) {
  const device::RmsNormParams p = rmsnorm_params(a);
  if (a.rows == 0) return;
  launch(device::sm90_rmsnorm_kernel, dim3(unsigned(a.rows)), dim3(device::kRmsThreads), 0, s, pdl, p);
}

void rope(void* x, int64_t ld, const int* pos, const float* cos, const float* sin, int rows, int heads, int D,
          cudaStream_t s, bool pdl) {
  FUTR_CHECK(D % 2 == 0 && int64_t(heads) * D <= ld, "RoPE: {} heads of {} do not fit a row of {}", heads, D,
             ld);
  if (rows == 0) return;
  device::RopeParams p{static_cast<uint16_t*>(x), ld, pos, cos, sin, heads, D};
  launch(device::sm90_rope_kernel, dim3(unsigned(rows)), dim3(256), 0, s, pdl, p);
}

void gather_rows(const void* table, const int* index, void* out, int rows, int width, cudaStream_t s,
                 bool pdl) {
  FUTR_CHECK(width >= 1 && rows >= 0 && table && index && out, "gather_rows: {} rows of {}", rows, width);
  FUTR_CHECK(width % 8 != 0 ||
                 (reinterpret_cast<uintptr_t>(table) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0),
             "gather_rows: rows of {} elements need 16-byte aligned buffers", width);
  if (rows == 0) return;
  device::GatherRowsParams p{static_cast<const uint16_t*>(table), index, static_cast<uint16_t*>(out), width};
  launch(device::sm90_gather_rows_kernel, dim3(unsigned(rows)), dim3(128), 0, s, pdl, p);
}

void swiglu(const void* gu, void* out, int rows, int I, cudaStream_t s, bool pdl) {
  if (rows == 0) return;
  const device::SwigluParams p = swiglu_params(gu, out, rows, I);
  launch(device::sm90_swiglu_kernel, dim3(unsigned(swiglu_units(rows, I))), dim3(256), 0, s, pdl, p);
}

// The host and device row layouts are one layout (the engine copies the device array back as is).
static_assert(sizeof(LogitsRowStats) == sizeof(device::LogitsRowStats) &&
                  offsetof(LogitsRowStats, lse) == offsetof(device::LogitsRowStats, lse) &&
                  offsetof(LogitsRowStats, logprob) == offsetof(device::LogitsRowStats, logprob) &&
                  offsetof(LogitsRowStats, max) == offsetof(device::LogitsRowStats, max) &&
                  offsetof(LogitsRowStats, argmax) == offsetof(device::LogitsRowStats, argmax) &&
                  offsetof(LogitsRowStats, nonfinite) == offsetof(device::LogitsRowStats, nonfinite),
              "cuda::LogitsRowStats must mirror device::LogitsRowStats");

void logits_reduce(const LogitsReduceArgs& a, cudaStream_t s, bool pdl) {
  FUTR_CHECK(a.vocab >= 1 && a.rows >= 0, "logits reduce: vocab {} rows {}", a.vocab, a.rows);
  const int64_t ld = a.ld ? a.ld : a.vocab;
  FUTR_CHECK(ld >= a.vocab, "logits reduce: row stride {} below the vocabulary {}", ld, a.vocab);
  FUTR_CHECK(a.logits && a.out, "logits reduce: a pointer is null");
  if (a.rows == 0) return;
  device::LogitsReduceParams p;
  p.logits = a.logits;
  p.ld = ld;
  p.vocab = a.vocab;
  p.targets = a.targets;
  p.out = reinterpret_cast<device::LogitsRowStats*>(a.out);
  launch(device::sm90_logits_reduce_kernel, dim3(unsigned(a.rows)), dim3(device::kLogitsThreads), 0, s, pdl,
         p);
}

void sample_topk(const SampleArgs& a, cudaStream_t s, bool pdl) {
  static_assert(sizeof(SampleRow) == sizeof(device::SampleRow) &&
                    offsetof(SampleRow, top_k) == offsetof(device::SampleRow, top_k),
                "cuda::SampleRow must mirror device::SampleRow");
  static_assert(kSampleMaxTopK == device::kSampleMaxTopK, "one top-k limit");
  FUTR_CHECK(a.vocab >= 1 && a.rows >= 0, "sampling: vocab {} rows {}", a.vocab, a.rows);
  const int64_t ld = a.ld ? a.ld : a.vocab;
  FUTR_CHECK(ld >= a.vocab, "sampling: row stride {} below the vocabulary {}", ld, a.vocab);
  FUTR_CHECK(a.logits && a.samplers && a.out, "sampling: a pointer is null");
  if (a.rows == 0) return;
  device::SampleParams p;
  p.logits = a.logits;
  p.ld = ld;
  p.vocab = a.vocab;
  p.rows = reinterpret_cast<const device::SampleRow*>(a.samplers);
  p.out = a.out;
  launch(device::sm90_sample_topk_kernel, dim3(unsigned(a.rows)), dim3(device::kSampleThreads), 0, s, pdl, p);
}

}  // namespace futr::cuda
