// Launcher of the LM head kernel (see lm_head.h). The compiled variants, one
// per row-tile count: (MT, U) = (1, 4), (2, 4), (4, 2): U, the chunks of W in
// flight per lane, shrinks where the x fragments of 4 row tiles need the
// registers (2 CTAs of 256 threads per SM: <= 128 registers). Every variant
// runs the same chain of MMAs per output (sm90_lm_head.cuh): the choice by M
// changes no bits.
#include "launch/lm_head.h"

#include <cstdint>

#include "core/error.h"
#include "kernels/sm90_lm_head.cuh"
#include "launch/check.h"
#include "launch/launch.cuh"

namespace futr::cuda {

namespace {

struct Variant {
  int mt, loads;
  void (*fn)(device::LmHeadParams);
};
constexpr Variant kVariants[] = {
    {1, 4, &device::sm90_lm_head_kernel<1, 4>},
    {2, 4, &device::sm90_lm_head_kernel<2, 4>},
    {4, 2, &device::sm90_lm_head_kernel<4, 2>},
};

const Variant& variant_for(int m) { return m <= 8 ? kVariants[0] : m <= 16 ? kVariants[1] : kVariants[2]; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* lm_head_unsupported(int n, int k) {
  if (n < 1) return "no vocabulary rows";
  if (k < device::kLmHeadChunkK || k % device::kLmHeadChunkK != 0) return "the hidden size is not a multiple of 64";
  return "";
}

const char* lm_head_describe(int m) {
  static const char* names[] = {"mt=1 loads=4", "mt=2 loads=4", "mt=4 loads=2"};
  return names[&variant_for(m) - kVariants];
}

void lm_head(const LmHeadArgs& a, cudaStream_t s, bool pdl) {
  FUTR_CHECK(a.m >= 0 && a.m <= kLmHeadMaxRows, "LM head: {} rows (1..{})", a.m, kLmHeadMaxRows);
  const char* why = lm_head_unsupported(a.n, a.k);
  FUTR_CHECK(why[0] == 0, "LM head: [{} x {}]: {}", a.n, a.k, why);
  const int64_t ld = a.ld ? a.ld : a.n;
  FUTR_CHECK(ld >= a.n, "LM head: row stride {} below the vocabulary {}", ld, a.n);
  FUTR_CHECK(a.w && a.x && a.out, "LM head: a pointer is null");
  FUTR_CHECK(aligned16(a.w) && aligned16(a.x), "LM head: W and x must be 16-byte aligned");
  if (a.m == 0) return;
  const device::LmHeadParams p{static_cast<const uint16_t*>(a.w), static_cast<const uint16_t*>(a.x), a.out, ld, a.m,
                               a.n, a.k};
  launch(variant_for(a.m).fn, dim3(unsigned(device::lm_head_units(a.n))), dim3(device::kLmHeadThreads), 0, s, pdl, p);
}

}  // namespace futr::cuda
