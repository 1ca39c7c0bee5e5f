// Integer bit-logic and packed 16-bit float arithmetic used by the in-register
// weight dequantizers (INT4 and E4M3 -> BF16). One function per instruction.
#pragma once

#include <cstdint>

namespace futr::device::ptx {

// lop3.b32 d = f(a, b, c) for the 8-bit truth table LUT; why: one instruction
// for mask-and-insert ((a & b) | c: LUT 0xEA), where plain C++ needs two.
template <uint32_t LUT>
__device__ __forceinline__ uint32_t lop3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, %4;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));
  return d;
}
// Truth table of (a & b) | c for lop3 (a = 0xF0, b = 0xCC, c = 0xAA).
inline constexpr uint32_t kLutAndOr = (0xF0 & 0xCC) | 0xAA;

// prmt.b32 d = bytes of {b, a} selected by `sel` (4 selector nibbles; bit 3 of
// a nibble replicates the selected byte's sign bit); why: sign-extends and
// moves two bytes into two 16-bit lanes in one instruction.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// fma.rn.bf16x2 d = a * b + c on two packed bf16 lanes; why: one instruction
// turns two biased nibbles (128 + n) into n - 8 exactly.
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// mul.rn.bf16x2 d = a * b (sm_90); why: rescales two re-biased E4M3 values
// (exponent bias 7 -> 127) with one instruction.
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

}  // namespace futr::device::ptx
