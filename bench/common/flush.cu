// A clean L2 flush for the benchmarks (bench::GraphTimer): one pass of 16-byte loads over a
// buffer of 2x the L2 size. Reading (unlike a memset) leaves only clean lines in
// L2, so the kernel timed next pays no write-backs of the flush's dirty lines,
// as in a real decode step where L2 holds the previous layers' (clean) weights.
#include <cuda_runtime.h>

#include <cstdint>

#include "launch/check.h"
#include "launch/launch.cuh"

namespace {
__global__ void read_flush_kernel(const uint4* p, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never: keeps the loads alive
}
}  // namespace

namespace futr::bench {

void flush_l2_read(const void* buf, size_t bytes, unsigned* sink, cudaStream_t s) {
  read_flush_kernel<<<1056, 512, 0, s>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  FUTR_CUDA_CHECK_LAUNCH();
}

}  // namespace futr::bench

namespace {
// Reads n16 16-byte words from each of up to 4 regions; 4 loads in flight per
// thread; xor-folds them so nothing is optimized away.
// With pdl, the kernel is launched as a programmatic dependent: it lets the
// next kernel launch at once and issues its first loads before waiting for
// the previous one (griddepcontrol), as the decode kernels do.
struct Regions {
  const uint4* p[4];
  size_t n16[4];
  int pdl;
  int blocked;  // each CTA reads one contiguous 1/gridDim slice (instead of a grid-stride sweep)
};
__global__ void read_regions_kernel(Regions r, unsigned* sink) {
  uint32_t acc = 0;
  bool waited = !r.pdl;
  if (r.pdl) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  for (int k = 0; k < 4; ++k) {
    const uint4* p = r.p[k];
    size_t n = r.n16[k];
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (r.blocked) {  // CTA b: [b n / grid, (b + 1) n / grid), block-stride inside it
      const size_t b0 = blockIdx.x * n / gridDim.x, b1 = (blockIdx.x + 1) * n / gridDim.x;
      p += b0, n = b1 - b0, i = threadIdx.x;
    }
    const size_t stride = r.blocked ? size_t(blockDim.x) : size_t(gridDim.x) * blockDim.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * stride);
      if (!waited) {  // the first loads are in flight: now wait for the previous kernel
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        waited = true;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
      const uint4 v = __ldcs(p + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
}  // namespace

namespace futr::bench {

void read_regions(const void* const* ptrs, const size_t* bytes, int count, int sm_count, unsigned* sink,
                  cudaStream_t s, bool pdl, bool blocked) {
  Regions r{};
  for (int k = 0; k < 4; ++k) {
    r.p[k] = k < count ? static_cast<const uint4*>(ptrs[k]) : nullptr;
    r.n16[k] = k < count ? bytes[k] / 16 : 0;
  }
  r.pdl = pdl ? 1 : 0;
  r.blocked = blocked ? 1 : 0;
  cuda::launch(read_regions_kernel, dim3(unsigned(4 * sm_count)), dim3(256), 0, s, pdl, r, sink);
}

}  // namespace futr::bench
