// Launcher of the LM head kernel (see lm_head.h). The compiled variants, one
// per weight format and row-tile count: BF16 (MT, U) = (1, 4), (2, 4), (4, 2):
// U, the chunks of W in flight per lane (64 bytes each), shrinks where the x
// fragments of 4 row tiles need the registers (2 CTAs of 256 threads per SM:
// <= 128 registers); INT4 groups of 128 and 64: (1, 8), (2, 8), (4, 8) (16
// bytes + a scale word per chunk). Every variant of a format runs the same chain of MMAs per output
// (sm90_lm_head.cuh): the choice by M changes no bits.
#include "launch/lm_head.h"

#include <cstdint>

#include "core/error.h"
#include "kernels/sm90_lm_head.cuh"
#include "launch/check.h"
#include "launch/launch.cuh"

namespace futr::cuda {

namespace {

struct Variant {
  const char* name;
  void (*fn)(device::LmHeadParams);
};
using device::LmHeadBf16;
using Int4G128 = device::Int4Format<128>;
using Int4G64 = device::Int4Format<64>;
constexpr Variant kBf16Variants[] = {
    {"bf16 mt=1 loads=4", &device::sm90_lm_head_kernel<LmHeadBf16, 1, 4>},
    {"bf16 mt=2 loads=4", &device::sm90_lm_head_kernel<LmHeadBf16, 2, 4>},
    {"bf16 mt=4 loads=2", &device::sm90_lm_head_kernel<LmHeadBf16, 4, 2>},
};
constexpr Variant kInt4G128Variants[] = {
    {"int4 g128 mt=1 loads=8", &device::sm90_lm_head_kernel<Int4G128, 1, 8>},
    {"int4 g128 mt=2 loads=8", &device::sm90_lm_head_kernel<Int4G128, 2, 8>},
    {"int4 g128 mt=4 loads=8", &device::sm90_lm_head_kernel<Int4G128, 4, 8>},
};
constexpr Variant kInt4G64Variants[] = {
    {"int4 g64 mt=1 loads=8", &device::sm90_lm_head_kernel<Int4G64, 1, 8>},
    {"int4 g64 mt=2 loads=8", &device::sm90_lm_head_kernel<Int4G64, 2, 8>},
    {"int4 g64 mt=4 loads=8", &device::sm90_lm_head_kernel<Int4G64, 4, 8>},
};

const Variant& variant_for(int m, int int4_group) {
  const Variant* v = int4_group == 128  ? kInt4G128Variants
                     : int4_group == 64 ? kInt4G64Variants
                                        : kBf16Variants;
  return m <= 8 ? v[0] : m <= 16 ? v[1] : v[2];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* lm_head_unsupported(int n, int k, int int4_group) {
  if (n < 1) return "no vocabulary rows";
  if (k < device::kLmHeadChunkK || k % device::kLmHeadChunkK != 0)
    return "the hidden size is not a multiple of 64";
  if (int4_group != 0 && int4_group != 64 && int4_group != 128) return "the INT4 head's group is 128 or 64";
  if (int4_group == 128 && k % 128 != 0)
    return "the INT4 head of group 128 needs a hidden size that is a multiple of 128";
  if (int4_group && n % 16 != 0) return "the INT4 head needs a vocabulary that is a multiple of 16 rows";
  return "";
}

const char* lm_head_describe(int m, int int4_group) { return variant_for(m, int4_group).name; }

void lm_head(const LmHeadArgs& a, cudaStream_t s, bool pdl) {
  FUTR_CHECK(a.m >= 0 && a.m <= kLmHeadMaxRows, "LM head: {} rows (1..{})", a.m, kLmHeadMaxRows);
  const int group = a.scales ? a.group : 0;
  const char* why = lm_head_unsupported(a.n, a.k, group);
  FUTR_CHECK(why[0] == 0, "LM head: [{} x {}]: {}", a.n, a.k, why);
  const int64_t ld = a.ld ? a.ld : a.n;
  FUTR_CHECK(ld >= a.n, "LM head: row stride {} below the vocabulary {}", ld, a.n);
  FUTR_CHECK(a.w && a.x && a.out, "LM head: a pointer is null");
  FUTR_CHECK(aligned16(a.w) && aligned16(a.x), "LM head: W and x must be 16-byte aligned");
  if (a.m == 0) return;
  const device::LmHeadParams p{a.w, a.scales, static_cast<const uint16_t*>(a.x), a.out, ld, a.m, a.n, a.k};
  launch(variant_for(a.m, group).fn, dim3(unsigned(device::lm_head_units(a.n))), dim3(device::kLmHeadThreads),
         0, s, pdl, p);
}

}  // namespace futr::cuda
