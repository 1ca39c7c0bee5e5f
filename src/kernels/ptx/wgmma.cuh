// WGMMA (warpgroup matrix multiply-accumulate, sm_90a) wrappers and the
// shared-memory operand contract of the sm90 GEMM. SASS: QGMMA (FP8), HGMMA (BF16).
//
// ============================ OPERAND CONTRACT ==============================
// Both operands are K-major ("TN"): A[M,K] row-major (activations) and B[N,K]
// row-major (weights, y = x W^T). One pipeline stage holds 128 BYTES of K per
// row: 128 E4M3 values or 64 BF16 values.
//
// Shared-memory tile (written by TMA with CU_TENSOR_MAP_SWIZZLE_128B):
//   rows of 128 bytes, stored back to back (row r at byte 128*r);
//   within row r the 16-byte chunk c (K bytes 16c..16c+15) sits at chunk
//   position c ^ (r % 8). An 8-row group (1024 bytes) is one swizzle atom, so
//   every tile base must be 1024-byte aligned.
//
// WGMMA smem descriptor (64 bits, PTX ISA "matrix descriptor"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset >> 4 (unused for swizzled K-major
//               operands whose instruction K fits in one 128B row: set to 1)
//   bits 32-45  stride-dimension byte offset >> 4 = 1024 >> 4 (next 8-row group)
//   bits 49-51  base offset = 0 (tiles are 1024-byte aligned)
//   bits 62-63  swizzle mode: 1 = 128B
// One instruction consumes 32 bytes of K (k32 for E4M3, k16 for BF16); the 4
// instructions of a stage use start addresses base + 32*kk, kk = 0..3: the
// hardware applies the XOR swizzle to the computed address, so advancing the
// start inside the 128-byte row addresses the right chunks.
//
// Accumulator fragment of m64nNk* (FP32, N/2 registers per thread): thread t of
// the warpgroup (warp w = t/32, lane l) holds, for every 8-column block j:
//   d[4j+0], d[4j+1] : row 16w + l/4,     columns 8j + 2(l%4) + {0, 1}
//   d[4j+2], d[4j+3] : row 16w + l/4 + 8, columns 8j + 2(l%4) + {0, 1}
// ============================================================================
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// Builds the descriptor above for a K-major, 128B-swizzled tile at `smem_ptr`.
__device__ __forceinline__ uint64_t make_wgmma_desc_sw128(const void* smem_ptr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = 0;
  desc |= uint64_t((addr & 0x3ffff) >> 4);  // start address
  desc |= uint64_t(1) << 16;                // leading byte offset (unused): 1
  desc |= uint64_t(1024 >> 4) << 32;        // stride byte offset: 8 rows x 128 B
  desc |= uint64_t(1) << 62;                // 128B swizzle
  return desc;
}

// The descriptor of an MN-major ("transposed"), 128B-swizzled B operand (used
// with imm-trans-b = 1): the tile is stored K rows of 128 bytes (64 BF16 of
// N each), 8-row groups 1024 bytes apart (stride byte offset), and the next
// 64 N columns (the next 128-byte panel) `panel_bytes` further (leading byte
// offset). Why: V of attention sits in shared memory as TMA brings it, one
// key per 128-byte row ([keys][dims]); O = P V needs it as B[N = dims][K =
// keys], which is that storage read MN-major, so no transpose pass is needed.
__device__ __forceinline__ uint64_t make_wgmma_desc_sw128_mn(const void* smem_ptr, uint32_t panel_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = 0;
  desc |= uint64_t((addr & 0x3ffff) >> 4);              // start address
  desc |= uint64_t((panel_bytes >> 4) & 0x3fff) << 16;  // leading byte offset: the next 64 N columns
  desc |= uint64_t(1024 >> 4) << 32;                    // stride byte offset: the next 8 K rows
  desc |= uint64_t(1) << 62;                            // 128B swizzle
  return desc;
}

// wgmma.fence: orders earlier register writes of the accumulators (zeroing,
// epilogue reads) before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// wgmma.commit_group: closes the batch of wgmmas issued so far into one group.
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// wgmma.wait_group N: waits until at most N committed groups are in flight, so
// the smem stage they read can be released and the registers read.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// An empty asm that "touches" a register: stops the compiler from moving
// accumulator reads/writes across wgmma issue and wait (the wgmma asm
// statements do not tell it that the registers change asynchronously).
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(d[i]);
}

// setmaxnreg.dec: the producer warpgroup gives registers back to the pool...
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// ...setmaxnreg.inc: ...so the consumer warpgroups can hold a 64x256 FP32
// accumulator (128 registers) plus the epilogue's working set.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- the instructions: D (+)= A * B^T, A and B from smem descriptors --------
// scale_d = 0 starts a fresh accumulation (D = A*B^T), 1 accumulates.
// E4M3 (K-major only for 8-bit types: no transpose immediates); BF16 with
// imm-trans-a = imm-trans-b = 0, both operands K-major as in the contract.
//
// Each accumulator register is its own asm operand, so the register lists are
// spelled out once here: FUTR_WGMMA_REGS_64 / _128 are the PTX operand lists
// "%0, ..., %63" / "%0, ..., %127" and FUTR_WGMMA_D64(d) / D128(d) the
// matching "+f"(d[i]) constraints. The descriptors and scale_d follow the
// accumulators: %N, %N+1 and %N+2 for an N-register fragment.
#define FUTR_WGMMA_REGS_64                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, "         \
  "%8, %9, %10, %11, %12, %13, %14, %15, "   \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define FUTR_WGMMA_REGS_128                          \
  FUTR_WGMMA_REGS_64                                 \
  ", "                                               \
  "%64, %65, %66, %67, %68, %69, %70, %71, "         \
  "%72, %73, %74, %75, %76, %77, %78, %79, "         \
  "%80, %81, %82, %83, %84, %85, %86, %87, "         \
  "%88, %89, %90, %91, %92, %93, %94, %95, "         \
  "%96, %97, %98, %99, %100, %101, %102, %103, "     \
  "%104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, " \
  "%120, %121, %122, %123, %124, %125, %126, %127"
#define FUTR_WGMMA_D8(d, i)                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define FUTR_WGMMA_D64(d)                                                               \
  FUTR_WGMMA_D8(d, 0), FUTR_WGMMA_D8(d, 8), FUTR_WGMMA_D8(d, 16), FUTR_WGMMA_D8(d, 24), \
      FUTR_WGMMA_D8(d, 32), FUTR_WGMMA_D8(d, 40), FUTR_WGMMA_D8(d, 48), FUTR_WGMMA_D8(d, 56)
#define FUTR_WGMMA_D128(d)                                                                                   \
  FUTR_WGMMA_D64(d), FUTR_WGMMA_D8(d, 64), FUTR_WGMMA_D8(d, 72), FUTR_WGMMA_D8(d, 80), FUTR_WGMMA_D8(d, 88), \
      FUTR_WGMMA_D8(d, 96), FUTR_WGMMA_D8(d, 104), FUTR_WGMMA_D8(d, 112), FUTR_WGMMA_D8(d, 120)

__device__ __forceinline__ void wgmma_m64n256k32_f32_e4m3(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                          int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
      "{" FUTR_WGMMA_REGS_128
      "}, %128, %129, p, 1, 1;\n"
      "}\n"
      : FUTR_WGMMA_D128(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n128k32_f32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                          int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{" FUTR_WGMMA_REGS_64
      "}, %64, %65, p, 1, 1;\n"
      "}\n"
      : FUTR_WGMMA_D64(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n256k16_f32_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                          int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{" FUTR_WGMMA_REGS_128
      "}, %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : FUTR_WGMMA_D128(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n128k16_f32_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                          int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{" FUTR_WGMMA_REGS_64
      "}, %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : FUTR_WGMMA_D64(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// ---- A from registers, B MN-major (imm-trans-b = 1): D (+)= A * B -----------
// The A fragment of m64nNk16 (4 registers of two BF16 each, per thread) is laid
// out like the accumulator's columns 16t..16t+15 (see the contract above):
//   a[0] = row 16w + l/4, k 2(l%4) + {0,1};   a[1] = row + 8, same k;
//   a[2] = row, k 8 + 2(l%4) + {0,1};          a[3] = row + 8, k 8 + ...
// so a softmax computed in the accumulator registers of S = Q K^T feeds
// O += P V without passing through shared memory.
#define FUTR_WGMMA_REGS_32                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, "         \
  "%8, %9, %10, %11, %12, %13, %14, %15, "   \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define FUTR_WGMMA_D32(d) FUTR_WGMMA_D8(d, 0), FUTR_WGMMA_D8(d, 8), FUTR_WGMMA_D8(d, 16), FUTR_WGMMA_D8(d, 24)

__device__ __forceinline__ void wgmma_m64n128k16_f32_bf16_rs_tb(float (&d)[64], const uint32_t (&a)[4],
                                                                uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{" FUTR_WGMMA_REGS_64
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      : FUTR_WGMMA_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n64k16_f32_bf16_rs_tb(float (&d)[32], const uint32_t (&a)[4],
                                                               uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{" FUTR_WGMMA_REGS_32
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n"
      "}\n"
      : FUTR_WGMMA_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

#undef FUTR_WGMMA_D32
#undef FUTR_WGMMA_REGS_32
#undef FUTR_WGMMA_D128
#undef FUTR_WGMMA_D64
#undef FUTR_WGMMA_D8
#undef FUTR_WGMMA_REGS_128
#undef FUTR_WGMMA_REGS_64

}  // namespace futr::device::ptx
