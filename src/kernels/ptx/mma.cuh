// mma.sync wrappers (warp-level tensor-core MMA, sm_80+; the decode kernels'
// only matrix instruction: Hopper's wgmma needs 64-row tiles, far too large for
// 1..32 query rows), and movmatrix, the warp-level transpose of its fragments.
//
// Fragment contract of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4*g + c with
// g = lane / 4 (0..7) and c = lane % 4 (0..3):
//
//   A (16 x 16, row-major, bf16x2 registers a[0..3]):
//     a[0] = A[g    ][2c, 2c+1]      a[2] = A[g    ][2c+8, 2c+9]
//     a[1] = A[g + 8][2c, 2c+1]      a[3] = A[g + 8][2c+8, 2c+9]
//   B (16 x 8, "col": element (k, n), bf16x2 registers b[0..1]):
//     b[0] = B[2c, 2c+1  ][g]        b[1] = B[2c+8, 2c+9][g]
//   C/D (16 x 8, fp32 d[0..3]):
//     d[0], d[1] = C[g    ][2c, 2c+1]
//     d[2], d[3] = C[g + 8][2c, 2c+1]
//
// The lower k index of each bf16x2 pair sits in the low 16 bits.
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// d += A * B on one m16n8k16 tile; why: the smallest BF16 tensor-core step,
// so a decode step with M <= 16 rows wastes at most one tile's padding.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  // Not volatile: a pure function of its operands, so the compiler may
  // interleave it with the dequantization of the next fragment.
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d = A * B (C = 0) on one m16n8k16 tile; why: starts a group's partial sum
// without zeroing four registers first (ptxas passes RZ as C).
__device__ __forceinline__ void mma_m16n8k16_bf16_zc(float (&d)[4], const uint32_t (&a)[4],
                                                     const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.f));
}

// d += A * B with FP16 operands (same fragment layout as the BF16 form); why:
// the INT4 KV mirror dequantizes to FP16 (n - 8 exact, 11-bit mantissa for the
// query and the probabilities, where BF16 keeps 8).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// movmatrix.sync.aligned.m8n8.trans.b16: transposes an 8x8 matrix of 16-bit
// values held as one register per lane (lane 4g + c: row g, columns 2c, 2c+1);
// why: turns the scores of S^T = K Q^T (tokens x heads) into the B operand of
// O^T = V^T P^T (tokens in k pairs) without shared memory.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

}  // namespace futr::device::ptx
