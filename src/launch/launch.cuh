// One kernel launch, optionally as a programmatic dependent (PDL): the
// launchers of the decode path's small kernels (decode_ops.cu,
// decode_attention.cu) go through it so a step's chain of kernels can overlap
// each launch with the tail of the kernel before it (kernels/ptx/pdl.cuh says
// what each kernel may do before griddepcontrol.wait). CUDA-only header: it
// includes the runtime's templated cudaLaunchKernelEx.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "launch/check.h"

namespace futr::cuda {

// kernel<<<grid, block, smem, s>>>(args...), with
// cudaLaunchAttributeProgrammaticStreamSerialization set to `pdl`. A kernel
// launched with pdl = true must call griddep_wait() before it reads what an
// earlier kernel of the stream writes (every kernel of the decode step does).
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl, A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  FUTR_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

}  // namespace futr::cuda
