// Host launchers for kernels/fill_random.cuh (random test/benchmark data).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace futr::cuda {

enum class FillType { kF32, kBF16, kF16, kE4M3, kU8, kU32 };

// Fills n elements of `type` at `p` with uniform values in [lo, hi) (raw bits
// for kU8/kU32), deterministically from `seed`.
void fill_random(void* p, FillType type, uint64_t n, uint64_t seed, float lo, float hi, cudaStream_t s);

}  // namespace futr::cuda
