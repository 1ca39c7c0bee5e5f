#include "kernels/fill_random.cuh"
#include "launch/check.h"
#include "launch/fill.h"

namespace futr::cuda {

namespace {
template <class T>
void launch(void* p, uint64_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (n == 0) return;
  const int threads = 256;
  const uint64_t blocks = (n + threads - 1) / threads;
  const int grid = int(blocks < 65536 ? blocks : 65536);
  device::fill_random_kernel<T><<<grid, threads, 0, s>>>(static_cast<T*>(p), n, seed, lo, hi);
  FUTR_CUDA_CHECK_LAUNCH();
}
}  // namespace

void fill_random(void* p, FillType type, uint64_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  switch (type) {
    case FillType::kF32: return launch<float>(p, n, seed, lo, hi, s);
    case FillType::kBF16: return launch<__nv_bfloat16>(p, n, seed, lo, hi, s);
    case FillType::kF16: return launch<__half>(p, n, seed, lo, hi, s);
    case FillType::kE4M3: return launch<__nv_fp8_e4m3>(p, n, seed, lo, hi, s);
    case FillType::kU8: return launch<uint8_t>(p, n, seed, lo, hi, s);
    case FillType::kU32: return launch<uint32_t>(p, n, seed, lo, hi, s);
  }
  fail("fill_random: unknown element type {}", int(type));
}

}  // namespace futr::cuda
