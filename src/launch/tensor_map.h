// TMA tensor maps (CUtensorMap) for 2-D row-major matrices, built on the host.
//
// The driver function cuTensorMapEncodeTiled is fetched at run time through
// cudaGetDriverEntryPointByVersion: the build machines have no libcuda.so, so
// nothing links -lcuda (docs/ARCHITECTURE.md, DESIGN "Build and platform facts").
//
// make_tensor_map_2d(base, elem, rows, cols, row_stride_bytes, box_rows, box_cols):
//   the matrix is [rows, cols] with cols contiguous; a copy moves a box of
//   [box_rows, box_cols] elements into shared memory with the 128-byte swizzle
//   (box_cols * element size must be 128 bytes), out-of-bounds elements read as
//   zero. Requirements checked here (futr::Error otherwise): base 16-byte
//   aligned, row_stride_bytes % 16 == 0, box sides <= 256.
#pragma once

#include <cuda.h>  // CUtensorMap and enums (types only)

#include <cstdint>

namespace futr::cuda {

enum class TmaElem { kU8, kBF16 };

CUtensorMap make_tensor_map_2d(const void* base, TmaElem elem, uint64_t rows, uint64_t cols,
                               uint64_t row_stride_bytes, uint32_t box_rows, uint32_t box_cols);

}  // namespace futr::cuda
