// INT4 / E4M3 fragment-order packing (src/quant/int4_pack.h) on the CPU:
// round trips, bijectivity of the layout, and an emulation of the decode
// kernels' fragment math (bit-level dequantizers + mma.sync.m16n8k16 fragment
// semantics, weights as A and activations as B) against the float64 reference,
// so a layout bug shows up here and not on the GPU.
#include "quant/int4_pack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/layout/int4_fragment.cuh"
#include "reference/w4a16_ref.h"

using namespace futr;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

quant::Int4Weights random_int4(int n, int k, int group) {
  quant::Int4Weights w{n, k, group, std::vector<int8_t>(size_t(n) * k),
                       std::vector<uint16_t>(size_t(n) * (k / group))};
  std::uniform_int_distribution<int> q(-8, 7);
  std::uniform_real_distribution<float> s(0.001f, 0.05f);
  for (auto& v : w.q) v = int8_t(q(rng()));
  for (auto& v : w.scale) v = float_to_fp16(s(rng()));
  return w;
}

// ---- host emulation of the device bit tricks (layout/int4_fragment.cuh) ------
uint32_t prmt_host(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t bytes = (uint64_t(b) << 32) | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = (sel >> (4 * i)) & 0xf;
    uint32_t byte = uint32_t(bytes >> (8 * (s & 7))) & 0xff;
    if (s & 8) byte = (byte & 0x80) ? 0xff : 0x00;
    d |= byte << (8 * i);
  }
  return d;
}
// bf16x2 lanes of a register as floats.
float lo_f(uint32_t r) { return bf16_to_float(uint16_t(r & 0xffff)); }
float hi_f(uint32_t r) { return bf16_to_float(uint16_t(r >> 16)); }
uint32_t pack2(float a, float b) { return uint32_t(float_to_bf16(a)) | (uint32_t(float_to_bf16(b)) << 16); }

// int4x8_to_bf16: ((w >> 4j) & 0x000f000f) | 0x43004300, then * 1 - 136 in BF16.
void int4x8_host(uint32_t w, uint32_t (&b)[4]) {
  for (int j = 0; j < 4; ++j) {
    const uint32_t v = ((w >> (4 * j)) & 0x000f000fu) | 0x43004300u;
    b[j] = pack2(round_bf16(lo_f(v) * 1.0f - 136.0f), round_bf16(hi_f(v) * 1.0f - 136.0f));
  }
}
// e4m3x4_to_bf16: prmt sign-extension, (x << 4) & 0x87f087f0, * 2^120 in BF16.
void e4m3x4_host(uint32_t w, uint32_t (&b)[2]) {
  const uint32_t lo = prmt_host(w, 0, 0x9180u), hi = prmt_host(w, 0, 0xB3A2u);
  const float e120 = std::ldexp(1.0f, 120);
  const uint32_t l = (lo << 4) & 0x87f087f0u, h = (hi << 4) & 0x87f087f0u;
  // BF16 subnormals are exact in float: the product is exact.
  b[0] = pack2(lo_f(l) * e120, hi_f(l) * e120);
  b[1] = pack2(lo_f(h) * e120, hi_f(h) * e120);
}

// One m16n8k16 MMA by the PTX fragment definition (mma.cuh): A rows g, g+8 from
// a[0..3] of lane 4g + c, B column g from b[0..1], D += A B in double.
void mma_host(double (&d)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = lane % 4;
    A[g][2 * c] = lo_f(a[lane][0]), A[g][2 * c + 1] = hi_f(a[lane][0]);
    A[g + 8][2 * c] = lo_f(a[lane][1]), A[g + 8][2 * c + 1] = hi_f(a[lane][1]);
    A[g][2 * c + 8] = lo_f(a[lane][2]), A[g][2 * c + 9] = hi_f(a[lane][2]);
    A[g + 8][2 * c + 8] = lo_f(a[lane][3]), A[g + 8][2 * c + 9] = hi_f(a[lane][3]);
    B[2 * c][g] = lo_f(b[lane][0]), B[2 * c + 1][g] = hi_f(b[lane][0]);
    B[2 * c + 8][g] = lo_f(b[lane][1]), B[2 * c + 9][g] = hi_f(b[lane][1]);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * c + (i % 2);
      double s = 0;
      for (int kk = 0; kk < 16; ++kk) s += double(A[row][kk]) * B[kk][col];
      d[lane][i] += s;
    }
  }
}

// Emulates the kernels on one m16 tile (weights = A) and up to 8 rows of x
// (B): lanes read their 16-byte INT4 (or 32-byte E4M3) chunks, dequantize with
// the bit tricks, take B from x by chunk_k, run the 4 steps of each chunk, and
// scale each group's sums. Returns y[m][16] for the tile's 16 channels.
std::vector<double> emulate_tile(bool int4, int ntiles, int k, int group, int m, int tile,
                                 const std::vector<uint8_t>& packed, const std::vector<uint16_t>& scales16,
                                 const std::vector<float>& scales32, const std::vector<uint16_t>& x) {
  double acc[32][4] = {};
  double blk[32][4] = {};
  const int nchunks = k / 64;
  for (int ch = 0; ch < nchunks; ++ch) {
    for (int i = 0; i < 4; ++i) {
      uint32_t a[32][4], b[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, c = lane % 4;
        auto xv = [&](int e) -> uint16_t {
          const int col = ch * 64 + layout::chunk_k(c, i, e);
          return g < m ? x[size_t(g) * k + col] : uint16_t(0);
        };
        b[lane][0] = xv(0) | uint32_t(xv(1)) << 16;
        b[lane][1] = xv(2) | uint32_t(xv(3)) << 16;
        if (int4) {
          uint32_t w;
          std::memcpy(&w, &packed[layout::tile_chunk_offset(ntiles, k, 512, tile, ch) + lane * 16 + 4 * i],
                      4);
          int4x8_host(w, a[lane]);  // word i = step i; pair j = a[j]
        } else {
          const size_t base = layout::tile_chunk_offset(ntiles, k, 1024, tile, ch) + size_t(i / 2) * 512 +
                              lane * 16 + 8 * (i % 2);
          uint32_t w0, w1;
          std::memcpy(&w0, &packed[base], 4);
          std::memcpy(&w1, &packed[base + 4], 4);
          uint32_t r0[2], r1[2];
          e4m3x4_host(w0, r0);
          e4m3x4_host(w1, r1);
          a[lane][0] = r0[0], a[lane][1] = r0[1], a[lane][2] = r1[0], a[lane][3] = r1[1];
        }
      }
      mma_host(blk, a, b);
    }
    // End of a group: scale this chunk's (or chunk pair's) sums per channel.
    const bool group_end = !int4 || group == 64 || ch % 2 == 1;
    if (!group_end) continue;
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4;
      for (int i = 0; i < 4; ++i) {
        const int r = g + 8 * (i / 2);
        double sc = 1;
        if (int4)
          sc = fp16_to_float(scales16[layout::int4_scale_index(k, group, tile * 16 + r, ch * 64 / group)]);
        acc[lane][i] += blk[lane][i] * sc;
        blk[lane][i] = 0;
      }
    }
  }
  std::vector<double> y(size_t(m) * 16);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i / 2), row = 2 * c + (i % 2);  // D rows = channels, columns = rows of x
      const double sc = int4 ? 1.0 : scales32[size_t(tile) * 16 + r];
      if (row < m) y[size_t(row) * 16 + r] = acc[lane][i] * sc;
    }
  }
  return y;
}

std::vector<uint16_t> random_x(int m, int k) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> x(size_t(m) * k);
  for (auto& v : x) v = float_to_bf16(u(rng()));
  return x;
}

}  // namespace

TEST(Int4Pack, RoundTrip) {
  for (auto [n, k, g] :
       {std::tuple{16, 64, 64}, {16, 128, 128}, {48, 576, 64}, {64, 384, 128}, {16, 1536, 64}}) {
    const auto w = random_int4(n, k, g);
    const auto p = quant::pack_int4(w);
    ASSERT_EQ(p.weights.size(), size_t(n) * k / 2);
    ASSERT_EQ(p.scales.size(), size_t(n) * (k / g));
    const auto u = quant::unpack_int4(p);
    EXPECT_EQ(u.q, w.q) << n << "x" << k << " g" << g;
    EXPECT_EQ(u.scale, w.scale) << n << "x" << k << " g" << g;
  }
}

TEST(Int4Pack, LayoutIsABijection) {
  for (auto [n, k, g] : {std::tuple{16, 576, 64}, {160, 512, 128}, {208, 256, 64}}) {
    std::vector<int> hits(size_t(n) * k, 0);  // one per nibble slot
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        const auto pos = layout::int4_position(n, k, r, c);
        ASSERT_LT(pos.byte, size_t(n) * k / 2);
        ++hits[pos.byte * 2 + pos.shift / 4];
      }
    for (int h : hits) ASSERT_EQ(h, 1);
    std::vector<int> shits(size_t(n) * (k / g), 0);
    for (int r = 0; r < n; ++r)
      for (int gi = 0; gi < k / g; ++gi) ++shits[layout::int4_scale_index(k, g, r, gi)];
    for (int h : shits) ASSERT_EQ(h, 1);
    std::vector<int> ehits(size_t(n) * k, 0);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) ++ehits[layout::e4m3_position(n, k, r, c)];
    for (int h : ehits) ASSERT_EQ(h, 1);
  }
}

TEST(Int4Pack, A16ByteLaneLoadIsTwoWeightRowRuns) {
  // Lane (g, c) of chunk 1 reads 32 nibbles: inputs 16c..16c+15 of the chunk for
  // channels g and g + 8 of the tile (docs/LAYOUTS.md).
  const int k = 256;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = lane % 4;
    for (int hi = 0; hi < 2; ++hi)
      for (int t = 0; t < 16; ++t) {
        const auto pos = layout::int4_position(16, k, g + 8 * hi, 64 + 16 * c + t);
        EXPECT_EQ(pos.byte / 16, size_t(512 / 16 + lane));  // one tile: chunk 1 starts at 512
      }
  }
}

TEST(Int4Pack, RejectsInvalidShapes) {
  EXPECT_THROW(quant::check_int4_shape(8, 128, 128), Error);
  EXPECT_THROW(quant::check_int4_shape(16, 96, 64), Error);
  EXPECT_THROW(quant::check_int4_shape(16, 576, 128), Error);
  EXPECT_THROW(quant::check_int4_shape(16, 128, 32), Error);
  auto w = random_int4(16, 64, 64);
  w.q[3] = 9;
  EXPECT_THROW(quant::pack_int4(w), Error);
  EXPECT_THROW(quant::pack_e4m3(16, 96, std::vector<uint8_t>(16 * 96)), Error);
  EXPECT_THROW(quant::pack_e4m3(8, 128, std::vector<uint8_t>(8 * 128)), Error);
}

TEST(Int4Pack, DequantizerBitTricksAreExact) {
  // Every nibble value through the INT4 trick (all pairs of a word alike).
  for (uint32_t n = 0; n < 16; ++n) {
    uint32_t b[4];
    int4x8_host(n * 0x11111111u, b);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(lo_f(b[j]), float(int(n) - 8));
      EXPECT_EQ(hi_f(b[j]), float(int(n) - 8));
    }
  }
  // Every finite E4M3 byte through the E4M3 trick, in each byte position.
  for (int v = 0; v < 256; ++v) {
    if ((v & 0x7f) == 0x7f) continue;  // NaN
    const float want = e4m3_to_float(uint8_t(v));
    for (int pos = 0; pos < 4; ++pos) {
      const uint32_t w = uint32_t(v) << (8 * pos) | (0x38u << (8 * ((pos + 1) % 4)));
      uint32_t b[2];
      e4m3x4_host(w, b);
      const float got = pos == 0 ? lo_f(b[0]) : pos == 1 ? hi_f(b[0]) : pos == 2 ? lo_f(b[1]) : hi_f(b[1]);
      EXPECT_EQ(got, want) << "byte 0x" << std::hex << v << " position " << pos;
    }
  }
}

TEST(Int4Pack, KernelFragmentEmulationMatchesReference) {
  for (auto [n, k, g, m] :
       {std::tuple{16, 256, 128, 1}, {32, 256, 64, 5}, {208, 576, 64, 8}, {144, 384, 128, 7}}) {
    const auto w = random_int4(n, k, g);
    const auto p = quant::pack_int4(w);
    const auto x = random_x(m, k);
    std::vector<float> ref(size_t(m) * n);
    ref::w4a16(w, x, m, ref);
    for (int tile = 0; tile < n / 16; ++tile) {
      const auto y = emulate_tile(true, n / 16, k, g, m, tile, p.weights, p.scales, {}, x);
      for (int r = 0; r < m; ++r)
        for (int ch = 0; ch < 16; ++ch) {
          const double want = ref[size_t(r) * n + tile * 16 + ch];
          EXPECT_NEAR(y[size_t(r) * 16 + ch], want, 1e-6 * (1 + std::fabs(want)))  // ref is float
              << "int4 " << n << "x" << k << " g" << g << " m=" << m << " row " << r << " ch "
              << tile * 16 + ch;
        }
    }
  }
}

TEST(Int4Pack, E4M3FragmentEmulationMatchesReference) {
  for (auto [n, k, m] : {std::tuple{16, 256, 3}, {160, 576, 8}}) {
    std::vector<uint8_t> e(size_t(n) * k);
    std::uniform_int_distribution<int> b(0, 255);
    for (auto& v : e) {
      do v = uint8_t(b(rng()));
      while ((v & 0x7f) == 0x7f);
    }
    std::vector<float> sc(n);
    for (auto& v : sc) v = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng());
    const auto packed = quant::pack_e4m3(n, k, e);
    EXPECT_EQ(quant::unpack_e4m3(n, k, packed), e);
    const auto x = random_x(m, k);
    std::vector<float> ref(size_t(m) * n);
    ref::w8a16(n, k, e, sc, x, m, ref);
    for (int tile = 0; tile < n / 16; ++tile) {
      const auto y = emulate_tile(false, n / 16, k, 0, m, tile, packed, {}, sc, x);
      for (int r = 0; r < m; ++r)
        for (int ch = 0; ch < 16; ++ch) {
          const double want = ref[size_t(r) * n + tile * 16 + ch];
          EXPECT_NEAR(y[size_t(r) * 16 + ch], want, 1e-6 * (1 + std::fabs(want)));
        }
    }
  }
}
