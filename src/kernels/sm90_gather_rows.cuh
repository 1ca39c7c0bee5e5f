// sm90_gather_rows: out[r] = table[index[r]] for rows of `width` 16-bit
// elements (the prefill path's embedding: BF16 rows of the token table into the
// BF16 residual of a packed chunk). A pure copy: the CPU reference is the
// row copy itself (tests/kernels/decode_ops_test.cpp).
//
// One CTA per output row; 16-byte vectors where the row width allows
// (width % 8 == 0, as every model's hidden size), else 2-byte elements.
// Launcher: src/launch/decode_ops.cu.
#pragma once

#include <cstdint>

#include "kernels/ptx/pdl.cuh"

namespace futr::device {

struct GatherRowsParams {
  const uint16_t* table = nullptr;  // [table_rows][width]
  const int* index = nullptr;       // [rows] row of the table (checked by the host: 0 <= index < table_rows)
  uint16_t* out = nullptr;          // [rows][width]
  int width = 0;
};

__global__ void __launch_bounds__(128) sm90_gather_rows_kernel(const GatherRowsParams p) {
  ptx::griddep_launch_dependents();  // PDL (ptx/pdl.cuh)
  ptx::griddep_wait();               // the index may come from the kernel before
  const int r = blockIdx.x;
  const size_t src = size_t(p.index[r]) * size_t(p.width), dst = size_t(r) * size_t(p.width);
  if (p.width % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(p.table + src);
    uint4* d = reinterpret_cast<uint4*>(p.out + dst);
    for (int i = threadIdx.x; i < p.width / 8; i += blockDim.x) d[i] = s[i];
  } else {
    for (int i = threadIdx.x; i < p.width; i += blockDim.x) p.out[dst + size_t(i)] = p.table[src + size_t(i)];
  }
}

}  // namespace futr::device
