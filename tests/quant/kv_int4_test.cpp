// The INT4 KV mirror's row format and layout (src/quant/kv_int4.h) and the
// block Walsh-Hadamard rotation (src/quant/hadamard.h).
#include "quant/kv_int4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <set>

#include "quant/hadamard.h"
#include "quant/quant_test_util.h"

using namespace futr;
using namespace futr::quant;

TEST(Hadamard, MatchesExplicitMatrixAndIsOrthogonal) {
  auto& rng = test::test_rng();
  for (int D : {64, 128})
    for (int b : {1, 2, 16, 32, 64}) {
      // Explicit H: block-diagonal, entry (-1)^popcount(i & j) / sqrt(b).
      std::vector<float> x = test::randn(size_t(D), 1.0f, rng), y = x;
      hadamard_rotate(y.data(), D, b);
      for (int j = 0; j < D; ++j) {
        double ref = 0;
        const int b0 = j / b * b;
        for (int i = b0; i < b0 + b; ++i)
          ref += x[size_t(i)] * ((std::popcount(unsigned((i - b0) & (j - b0))) % 2) ? -1.0 : 1.0);
        ref /= std::sqrt(double(b));
        EXPECT_NEAR(y[size_t(j)], ref, 1e-5) << D << " " << b << " " << j;
      }
      // Self-inverse (H symmetric and orthogonal) and norm / dot preserving.
      std::vector<float> z = y;
      hadamard_rotate(z.data(), D, b);
      std::vector<float> k = test::randn(size_t(D), 1.0f, rng), kr = k;
      hadamard_rotate(kr.data(), D, b);
      double n0 = 0, n1 = 0, d0 = 0, d1 = 0;
      for (int i = 0; i < D; ++i) {
        EXPECT_NEAR(z[size_t(i)], x[size_t(i)], 1e-5);
        n0 += x[size_t(i)] * x[size_t(i)];
        n1 += y[size_t(i)] * y[size_t(i)];
        d0 += x[size_t(i)] * k[size_t(i)];
        d1 += y[size_t(i)] * kr[size_t(i)];
      }
      EXPECT_NEAR(n1, n0, 1e-4 * n0);
      EXPECT_NEAR(d1, d0, 1e-4 * std::sqrt(n0) * 10);
    }
  float v[48];
  EXPECT_FUTR_ERROR(hadamard_rotate(v, 48, 32), "block 32 must be a power of two dividing the row length 48");
  EXPECT_FUTR_ERROR(hadamard_rotate(v, 48, 12), "block 12");
}

TEST(Hadamard, SpreadsAnOutlier) {
  // One outlier channel: after rotation the row's amax / rms ratio falls, which is
  // what makes per-row INT4 scales (amax / 7) fit the other channels better.
  std::vector<float> x(64, 0.1f);
  x[3] = 20.0f;
  std::vector<float> y = x;
  hadamard_rotate(y.data(), 64, 64);
  float ax = 0, ay = 0;
  for (int i = 0; i < 64; ++i) {
    ax = std::max(ax, std::fabs(x[size_t(i)]));
    ay = std::max(ay, std::fabs(y[size_t(i)]));
  }
  EXPECT_LT(ay, ax / 6);
}

TEST(KvInt4, RowQuantization) {
  auto& rng = test::test_rng();
  std::vector<float> x = test::randn(64, 3.0f, rng);
  int8_t q[64];
  const float s = kv_int4_quantize_row(x.data(), 64, q);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(s, amax / 7.0f);
  for (int i = 0; i < 64; ++i) {
    EXPECT_GE(q[i], -7);
    EXPECT_LE(q[i], 7);
    EXPECT_LE(std::fabs(x[size_t(i)] - q[i] * s), 0.5f * s * 1.0001f);
  }
  std::vector<float> z(64, 0.0f);
  EXPECT_EQ(kv_int4_quantize_row(z.data(), 64, q), 0.0f);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(q[i], 0);
  z[1] = NAN;
  EXPECT_FUTR_ERROR(kv_int4_quantize_row(z.data(), 64, q), "non-finite");
}

TEST(KvInt4, KeyLayoutIsTheMmaBFragment) {
  for (int D : {64, 128}) {
    const int heads = 3, slots = 24;
    std::set<std::pair<size_t, int>> seen;
    for (int slot = 0; slot < slots; ++slot)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < D; ++d) {
          const layout::KvNibble p = layout::kv_key_nibble(heads, D, slot, h, d);
          ASSERT_LT(p.byte, layout::kv_nibble_bytes(heads, D, slots));
          ASSERT_TRUE(seen.insert({p.byte, p.shift}).second) << "collision";
          // Decode the position back per the documented contract.
          const size_t tile_bytes = size_t(8) * D / 2;
          const size_t tile = p.byte / (tile_bytes * heads), in_head = p.byte % tile_bytes;
          EXPECT_EQ(int(p.byte / tile_bytes % heads), h);
          const int lane = int(in_head / size_t(D / 8)), j = int(in_head % size_t(D / 8));
          const int g = lane / 4, c = lane % 4, s = j / 2, e = j % 2;
          EXPECT_EQ(int(tile) * 8 + g, slot);  // B fragment column n = g = token
          // mma.m16n8k16 B fragment: b0,b1 at k rows 2c, 2c+1; b2,b3 at 2c+8, 2c+9 of step s.
          EXPECT_EQ(16 * s + 8 * e + 2 * c + p.shift / 4, d);
        }
    EXPECT_EQ(seen.size(), size_t(2) * layout::kv_nibble_bytes(heads, D, slots));
  }
}

TEST(KvInt4, ValueLayoutIsChannelOrder) {
  const int heads = 2, D = 64;
  for (int slot = 0; slot < 5; ++slot)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < D; ++d) {
        const layout::KvNibble p = layout::kv_value_nibble(heads, D, slot, h, d);
        EXPECT_EQ(p.byte, (size_t(slot) * heads + h) * (D / 2) + d / 2);
        EXPECT_EQ(p.shift, (d % 2) * 4);
      }
  EXPECT_EQ(layout::kv_scale_index(24, 5, 2), size_t(2 * 24 + 5));  // head-major
}

// The k permutation of S^T = K Q^T over the mirror (kernels/layout/kv_cache.cuh):
// dequantizing a lane's K words the way int4x8_to_half2 does and pairing them
// with the query dims kv_int4_query_dim gives, summed over every mma step and
// column, exactly the dot product q . k of each token.
TEST(KvInt4, KeyFragmentsMeetTheQueryPermutation) {
  auto& rng = test::test_rng();
  std::uniform_int_distribution<int> nib(1, 15);
  for (int D : {64, 128}) {
    const int heads = 2, slots = 16, h = 1;
    std::vector<uint8_t> bytes(layout::kv_nibble_bytes(heads, D, slots));
    std::vector<int> kq(size_t(slots) * D);
    for (int t = 0; t < slots; ++t)
      for (int d = 0; d < D; ++d) {
        const int n = nib(rng);
        kq[size_t(t) * D + d] = n - 8;
        const layout::KvNibble p = layout::kv_key_nibble(heads, D, t, h, d);
        bytes[p.byte] = uint8_t((bytes[p.byte] & ~(0xf << p.shift)) | (n << p.shift));
      }
    std::vector<int> q(static_cast<size_t>(D));
    for (int& v : q) v = nib(rng) - 8;
    // Lane (g, c) of tile `tile`: its D/8 bytes; word i -> r[0..3] (half 0, half 1).
    for (int tile = 0; tile < 2; ++tile)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, c = lane % 4, t = 8 * tile + g;
        const size_t base = layout::kv_key_nibble(heads, D, t, h, 2 * c).byte;  // byte 0 of the lane
        long dot = 0;
        for (int m = 0; m < D / 16; ++m)
          for (int col : {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9}) {
            // A column col of step m = 2i + hh is register r[2hh + col/8], half col%2.
            const int i = m / 2, hh = m % 2, j = 2 * hh + col / 8, half = col % 2;
            uint32_t w = 0;
            for (int b = 0; b < 4; ++b) w |= uint32_t(bytes[base + size_t(4 * i + b)]) << (8 * b);
            const int n = int((w >> (16 * half + 4 * j)) & 0xf);
            dot += long(n - 8) * q[size_t(layout::kv_int4_query_dim(m, col))];
          }
        // Each lane covers a quarter of the dims (columns of its quad index c).
        long want = 0;
        for (int d = 0; d < D; ++d)
          if ((d % 8) / 2 == c) want += long(kq[size_t(t) * D + d]) * q[size_t(d)];
        EXPECT_EQ(dot, want) << "D " << D << " lane " << lane << " tile " << tile;
      }
  }
}
