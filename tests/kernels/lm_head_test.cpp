// The LM head kernel (src/launch/lm_head.h, src/kernels/sm90_lm_head.cuh)
// against ref::lm_head (src/reference/lm_head_ref.h), and its batch invariance.
//
// Inputs: fresh random BF16 x ~ N(0, 1) and W ~ N(0, 0.05) every run. Shapes:
// the real heads of SmolLM2 (49152 x 576) and Llama-3 (128256 x 4096; the
// reference over a sample of 1500 vocabulary rows, the tail included) and
// edge shapes (a vocabulary that is not a multiple of the 16-row tile or of a
// unit's 128 rows, K = 64), for M = 1..32 across the row-tile variants. The
// output is poisoned (0xff: NaN) with a row stride wider than the vocabulary;
// every computed entry must be finite and the stride's gap untouched.
// Tolerance: tol::kLmHead (relative L2 over the checked entries).
// Batch invariance: the rows of an M = 32 launch have the same bits as the
// same rows in launches of M = 1..31, at any position among the rows.
// The INT4 head (groups of 128 and 64, quant::pack_int4's order): random
// nibbles and FP16 scales against ref::w4a16 (float64 over the dequantized
// weights, unrounded), on SmolLM2's (group 64: K = 576) and Llama-3's head
// shapes, the same tolerance and the same invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "launch/buffer.h"
#include "launch/lm_head.h"
#include "launch/stream.h"
#include "quant/int4_pack.h"
#include "reference/lm_head_ref.h"
#include "reference/w4a16_ref.h"
#include "support/compare.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerances.h"

using namespace futr;

namespace {

using test::rng;

TEST(LmHeadRef, SmallByHand) {
  // x = [1, 2], W = [[1, 1], [0.5, -1]] (BF16 bits): out = [3, -1.5].
  const std::vector<uint16_t> x = {0x3f80, 0x4000};
  const std::vector<uint16_t> w = {0x3f80, 0x3f80, 0x3f00, 0xbf80};
  std::vector<float> out(3, 9.f);
  ref::lm_head(w, x, 1, 2, 2, out, 3);
  EXPECT_EQ(out[0], 3.f);
  EXPECT_EQ(out[1], -1.5f);
  EXPECT_EQ(out[2], 9.f);  // the stride's gap untouched
}

TEST(LmHeadArgs, RefusesBadArguments) {
  cuda::LmHeadArgs a;
  a.m = 33;
  a.n = 16;
  a.k = 64;
  EXPECT_FUTR_ERROR(cuda::lm_head(a, nullptr), "rows");
  a.m = 1;
  a.k = 96;
  EXPECT_FUTR_ERROR(cuda::lm_head(a, nullptr), "multiple of 64");
  a.k = 64;
  a.ld = 8;
  EXPECT_FUTR_ERROR(cuda::lm_head(a, nullptr), "row stride");
  a.ld = 0;
  EXPECT_FUTR_ERROR(cuda::lm_head(a, nullptr), "null");
  EXPECT_STREQ(cuda::lm_head_unsupported(49152, 576), "");
  EXPECT_STRNE(cuda::lm_head_unsupported(100, 100), "");
  EXPECT_STREQ(cuda::lm_head_unsupported(128256, 4096, 128), "");
  EXPECT_STREQ(cuda::lm_head_unsupported(49152, 576, 64), "");
  EXPECT_STRNE(cuda::lm_head_unsupported(1008, 576, 128), "");  // K % 128
  EXPECT_STRNE(cuda::lm_head_unsupported(1001, 512, 128), "");  // N % 16
  EXPECT_STRNE(cuda::lm_head_unsupported(1008, 512, 32), "");   // the group
  a.scales = &a;                                                // an INT4 head of group 128 and K = 64
  EXPECT_FUTR_ERROR(cuda::lm_head(a, nullptr), "multiple of 128");
}

struct Head {
  int n, k;
  std::vector<uint16_t> w;
  cuda::DeviceBuffer<uint16_t> d_w;
  Head(int n_, int k_) : n(n_), k(k_), w(test::randn_bf16(size_t(n_) * size_t(k_), 0.05f)), d_w(w) {}
};

// The vocabulary rows checked: all of a small head, else a sample with both ends and the tail.
std::vector<int> rows_checked(int n) {
  std::vector<int> r;
  if (n <= 50000) {
    r.resize(size_t(n));
    std::iota(r.begin(), r.end(), 0);
    return r;
  }
  for (int v = 0; v < 300; ++v) r.push_back(v);
  for (int v = n - 300; v < n; ++v) r.push_back(v);
  std::uniform_int_distribution<int> d(300, n - 301);
  for (int i = 0; i < 900; ++i) r.push_back(d(rng()));
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

void check(const Head& h, int m) {
  SCOPED_TRACE(testing::Message() << "n " << h.n << " k " << h.k << " m " << m << " ("
                                  << cuda::lm_head_describe(m) << ")");
  const int64_t ld = h.n + 5;
  const std::vector<uint16_t> x = test::randn_bf16(size_t(m) * size_t(h.k), 1.f);
  cuda::Stream st;
  cuda::DeviceBuffer<uint16_t> d_x(x);
  cuda::DeviceBuffer<float> d_out(size_t(m) * size_t(ld));
  d_out.fill_bytes(0xff);
  cuda::LmHeadArgs a{h.d_w.get(), d_x.get(), d_out.get(), ld, m, h.n, h.k};
  cuda::lm_head(a, st);
  const std::vector<float> got = d_out.download(st);
  const std::vector<int> rows = rows_checked(h.n);
  std::vector<float> want(got.size(), 0.f);
  ref::lm_head(h.w, x, m, h.n, h.k, want, ld, rows);
  std::vector<float> g, w;
  for (int r = 0; r < m; ++r) {
    for (int v : rows) {
      g.push_back(got[size_t(r) * size_t(ld) + size_t(v)]);
      w.push_back(want[size_t(r) * size_t(ld) + size_t(v)]);
    }
    for (int64_t v = h.n; v < ld; ++v) {  // the gap keeps its poison
      uint32_t bits;
      std::memcpy(&bits, &got[size_t(r) * size_t(ld) + size_t(v)], 4);
      ASSERT_EQ(bits, 0xffffffffu) << "row " << r << " column " << v << " written";
    }
  }
  const test::ErrorStats e = test::compare(g, w);
  EXPECT_EQ(e.non_finite, 0u);
  EXPECT_LE(e.rel_l2, test::tol::kLmHead);
  std::printf("lm_head n %d k %d m %2d: rel L2 %.3g (bound %.1g)\n", h.n, h.k, m, e.rel_l2,
              test::tol::kLmHead);
}

TEST(LmHead, MatchesReferenceEdgeShapes) {
  FUTR_REQUIRE_GPU();
  for (auto [n, k] : {std::pair{17, 64}, std::pair{1000, 128}, std::pair{130, 576}, std::pair{4096, 2048}}) {
    const Head h(n, k);
    for (int m : {1, 2, 7, 8, 9, 16, 17, 31, 32}) check(h, m);
  }
}

TEST(LmHead, MatchesReferenceSmolLM2) {
  FUTR_REQUIRE_GPU();
  const Head h(49152, 576);
  for (int m : {1, 4, 8, 16, 32}) check(h, m);
}

TEST(LmHead, MatchesReferenceLlama3) {
  FUTR_REQUIRE_GPU();
  const Head h(128256, 4096);
  for (int m : {1, 8, 16, 32}) check(h, m);
}

// Row r of an M = 32 launch against the same x row launched with M = 1..31
// rows, placed at position (r + shift) % m among random other rows.
TEST(LmHead, BatchInvariant) {
  FUTR_REQUIRE_GPU();
  for (auto [n, k] : {std::pair{1000, 128}, std::pair{49152, 576}}) {
    SCOPED_TRACE(testing::Message() << "n " << n << " k " << k);
    const Head h(n, k);
    cuda::Stream st;
    const std::vector<uint16_t> x32 = test::randn_bf16(size_t(32) * size_t(k), 1.f);
    cuda::DeviceBuffer<uint16_t> d_x32(x32);
    cuda::DeviceBuffer<float> d_ref(size_t(32) * size_t(n));
    cuda::lm_head({h.d_w.get(), d_x32.get(), d_ref.get(), 0, 32, n, k}, st);
    const std::vector<float> ref32 = d_ref.download(st);
    for (int m = 1; m < 32; ++m) {
      const int r = int(rng()() % 32u), at = int(rng()() % uint64_t(m));
      std::vector<uint16_t> x = test::randn_bf16(size_t(m) * size_t(k), 1.f);
      std::copy_n(x32.begin() + ptrdiff_t(r) * k, k, x.begin() + ptrdiff_t(at) * k);
      cuda::DeviceBuffer<uint16_t> d_x(x);
      cuda::DeviceBuffer<float> d_out(size_t(m) * size_t(n));
      cuda::lm_head({h.d_w.get(), d_x.get(), d_out.get(), 0, m, n, k}, st);
      const std::vector<float> got = d_out.download(st);
      EXPECT_EQ(std::memcmp(got.data() + size_t(at) * size_t(n), ref32.data() + size_t(r) * size_t(n),
                            size_t(n) * sizeof(float)),
                0)
          << "row " << r << " of 32 at position " << at << " of " << m;
    }
  }
}

// ---- the INT4 head ----------------------------------------------------------------

struct Int4Head {
  quant::Int4Weights w;
  cuda::DeviceBuffer<uint8_t> d_w;
  cuda::DeviceBuffer<uint16_t> d_s;
  Int4Head(int n, int k, int group) {
    w.n = n, w.k = k, w.group = group;
    w.q.resize(size_t(n) * size_t(k));
    w.scale.resize(size_t(n) * size_t(k / group));
    std::uniform_int_distribution<int> q(-8, 7);
    std::uniform_real_distribution<float> sc(0.002f, 0.02f);
    for (auto& v : w.q) v = int8_t(q(rng()));
    for (auto& v : w.scale) v = float_to_fp16(sc(rng()));
    const quant::Int4Packed p = quant::pack_int4(w);
    d_w = cuda::DeviceBuffer<uint8_t>(p.weights);
    d_s = cuda::DeviceBuffer<uint16_t>(p.scales);
  }
};

void check_int4(const Int4Head& h, int m) {
  const int n = h.w.n, k = h.w.k;
  SCOPED_TRACE(testing::Message() << "int4 n " << n << " k " << k << " m " << m << " ("
                                  << cuda::lm_head_describe(m, h.w.group) << ")");
  const std::vector<uint16_t> x = test::randn_bf16(size_t(m) * size_t(k), 1.f);
  cuda::Stream st;
  cuda::DeviceBuffer<uint16_t> d_x(x);
  cuda::DeviceBuffer<float> d_out(size_t(m) * size_t(n));
  d_out.fill_bytes(0xff);
  cuda::LmHeadArgs a{h.d_w.get(), d_x.get(), d_out.get(), 0, m, n, k, h.d_s.get(), h.w.group};
  cuda::lm_head(a, st);
  const std::vector<float> got = d_out.download(st);
  const std::vector<int> rows = rows_checked(n);
  std::vector<float> want(got.size(), 0.f);
  ref::w4a16(h.w, x, m, want, rows);
  std::vector<float> g, w;
  for (int r = 0; r < m; ++r)
    for (int v : rows) {
      g.push_back(got[size_t(r) * size_t(n) + size_t(v)]);
      w.push_back(want[size_t(r) * size_t(n) + size_t(v)]);
    }
  const test::ErrorStats e = test::compare(g, w);
  EXPECT_EQ(e.non_finite, 0u);
  EXPECT_LE(e.rel_l2, test::tol::kLmHead);
  std::printf("lm_head int4 g%d n %d k %d m %2d: rel L2 %.3g (bound %.1g)\n", h.w.group, n, k, m, e.rel_l2,
              test::tol::kLmHead);
}

TEST(LmHeadInt4, MatchesReference) {
  FUTR_REQUIRE_GPU();
  for (auto [n, k, g] :
       {std::tuple{1008, 128, 128}, std::tuple{49152, 640, 128}, std::tuple{128256, 4096, 128},
        std::tuple{1008, 192, 64}, std::tuple{49152, 576, 64}}) {
    const Int4Head h(n, k, g);
    for (int m : {1, 8, 9, 16, 17, 32}) check_int4(h, m);
  }
}

TEST(LmHeadInt4, BatchInvariant) {
  FUTR_REQUIRE_GPU();
  for (auto [k, group] : {std::pair{640, 128}, std::pair{576, 64}}) {
    SCOPED_TRACE(testing::Message() << "group " << group);
    const int n = 49152;
    const Int4Head h(n, k, group);
    cuda::Stream st;
    const std::vector<uint16_t> x32 = test::randn_bf16(size_t(32) * size_t(k), 1.f);
    cuda::DeviceBuffer<uint16_t> d_x32(x32);
    cuda::DeviceBuffer<float> d_ref(size_t(32) * size_t(n));
    cuda::lm_head({h.d_w.get(), d_x32.get(), d_ref.get(), 0, 32, n, k, h.d_s.get(), group}, st);
    const std::vector<float> ref32 = d_ref.download(st);
    for (int m = 1; m < 32; ++m) {
      const int r = int(rng()() % 32u), at = int(rng()() % uint64_t(m));
      std::vector<uint16_t> x = test::randn_bf16(size_t(m) * size_t(k), 1.f);
      std::copy_n(x32.begin() + ptrdiff_t(r) * k, k, x.begin() + ptrdiff_t(at) * k);
      cuda::DeviceBuffer<uint16_t> d_x(x);
      cuda::DeviceBuffer<float> d_out(size_t(m) * size_t(n));
      cuda::lm_head({h.d_w.get(), d_x.get(), d_out.get(), 0, m, n, k, h.d_s.get(), group}, st);
      const std::vector<float> got = d_out.download(st);
      EXPECT_EQ(std::memcmp(got.data() + size_t(at) * size_t(n), ref32.data() + size_t(r) * size_t(n),
                            size_t(n) * sizeof(float)),
                0)
          << "row " << r << " of 32 at position " << at << " of " << m;
    }
  }
}

}  // namespace
