// Looping executors over the work-unit bodies (see work_unit_loop.h).
#include "work_unit_loop.h"

#include <cstdint>

#include "kernels/sm90_lm_head.cuh"
#include "kernels/sm90_logits_reduce.cuh"
#include "kernels/sm90_rmsnorm.cuh"
#include "kernels/sm90_sample_topk.cuh"
#include "kernels/sm90_swiglu.cuh"
#include "launch/check.h"
#include "launch/decode_ops_params.cuh"

namespace futr::test {
namespace {

// Inputs complete before the launch: nothing to wait for, nothing to release.
struct NoDeps {
  __device__ void release() const {}
  __device__ void wait() const {}
};

// This CTA's units: ctas - 1 - blockIdx.x, then every gridDim.x-th one.
#define FOR_UNITS(u, units) for (int u = int(gridDim.x - 1 - blockIdx.x); u < (units); u += int(gridDim.x))

__global__ void __launch_bounds__(device::kRmsThreads)
    rmsnorm_loop(const device::RmsNormParams p, int units) {
  __shared__ device::RmsNormSmem sm;
  FOR_UNITS(u, units) {
    device::rmsnorm_unit(p, u, units, sm, NoDeps{});
    __syncthreads();
  }
}

__global__ void __launch_bounds__(device::kSwigluThreads)
    swiglu_loop(const device::SwigluParams p, int units) {
  FOR_UNITS(u, units) {
    device::swiglu_unit(p, u, units, NoDeps{});
    __syncthreads();
  }
}

__global__ void __launch_bounds__(device::kLogitsThreads)
    logits_loop(const device::LogitsReduceParams p, int units) {
  constexpr int kWarps = device::LogitsReduceSmem::kWarps;
  __shared__ float val[kWarps];
  __shared__ int idx[kWarps], bad[kWarps];
  __shared__ double sum[kWarps];
  __shared__ float mx;
  FOR_UNITS(u, units) {
    device::logits_reduce_unit(p, u, units, device::LogitsReduceSmem{val, idx, bad, sum, &mx}, NoDeps{});
    __syncthreads();
  }
}

__global__ void __launch_bounds__(device::kSampleThreads)
    sample_loop(const device::SampleParams p, int units) {
  __shared__ device::SampleTopkSmem::Tmp tmp;
  __shared__ uint32_t hist[256];
  __shared__ unsigned long long cand[device::kSampleMaxTopK];
  __shared__ double prob[device::kSampleMaxTopK];
  __shared__ uint32_t prefix;
  __shared__ int rank, gt, keep;
  __shared__ double div;
  const device::SampleTopkSmem sm{&tmp, hist, cand, prob, &prefix, &rank, &gt, &keep, &div};
  FOR_UNITS(u, units) {
    device::sample_topk_unit(p, u, units, sm, NoDeps{});
    __syncthreads();
  }
}

template <int MT, int U>
__global__ void __launch_bounds__(device::kLmHeadThreads)
    lm_head_loop(const device::LmHeadParams p, int units) {
  FOR_UNITS(u, units) {
    device::lm_head_unit<device::LmHeadBf16, MT, U>(p, u, units, NoDeps{});
    __syncthreads();
  }
}

}  // namespace

void loop_rmsnorm(const cuda::RmsNormArgs& a, int ctas, cudaStream_t s) {
  rmsnorm_loop<<<ctas, device::kRmsThreads, 0, s>>>(cuda::rmsnorm_params(a), a.rows);
  FUTR_CUDA_CHECK_LAUNCH();
}

void loop_swiglu(const void* gu, void* out, int rows, int I, int units, int ctas, cudaStream_t s) {
  swiglu_loop<<<ctas, device::kSwigluThreads, 0, s>>>(cuda::swiglu_params(gu, out, rows, I), units);
  FUTR_CUDA_CHECK_LAUNCH();
}

void loop_logits_reduce(const cuda::LogitsReduceArgs& a, int ctas, cudaStream_t s) {
  device::LogitsReduceParams p;
  p.logits = a.logits;
  p.ld = a.ld ? a.ld : a.vocab;
  p.vocab = a.vocab;
  p.targets = a.targets;
  p.out = reinterpret_cast<device::LogitsRowStats*>(a.out);
  logits_loop<<<ctas, device::kLogitsThreads, 0, s>>>(p, a.rows);
  FUTR_CUDA_CHECK_LAUNCH();
}

void loop_sample_topk(const cuda::SampleArgs& a, int ctas, cudaStream_t s) {
  device::SampleParams p;
  p.logits = a.logits;
  p.ld = a.ld ? a.ld : a.vocab;
  p.vocab = a.vocab;
  p.rows = reinterpret_cast<const device::SampleRow*>(a.samplers);
  p.out = a.out;
  sample_loop<<<ctas, device::kSampleThreads, 0, s>>>(p, a.rows);
  FUTR_CUDA_CHECK_LAUNCH();
}

void loop_lm_head(const cuda::LmHeadArgs& a, int ctas, cudaStream_t s) {
  const device::LmHeadParams p{a.w, nullptr, static_cast<const uint16_t*>(a.x), a.out, a.ld ? a.ld : a.n, a.m,
                               a.n, a.k};
  const int units = device::lm_head_units(a.n);
  // The launcher's BF16 variant for m (launch/lm_head.cu): another one gives the same bits too.
  if (a.m <= 8) lm_head_loop<1, 4><<<ctas, device::kLmHeadThreads, 0, s>>>(p, units);
  else if (a.m <= 16) lm_head_loop<2, 4><<<ctas, device::kLmHeadThreads, 0, s>>>(p, units);
  else lm_head_loop<4, 2><<<ctas, device::kLmHeadThreads, 0, s>>>(p, units);
  FUTR_CUDA_CHECK_LAUNCH();
}

}  // namespace futr::test
