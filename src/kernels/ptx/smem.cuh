// Shared-memory addressing for PTX operands: the one definition of
// smem_addr(), which every wrapper that names a shared-memory operand
// (cp.async, mbarrier, TMA, ldmatrix, ...) includes.
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// cvta.to.shared: the 32-bit shared-window address of a generic pointer;
// why: PTX's .shared operands take that address, not the 64-bit generic one.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace futr::device::ptx
