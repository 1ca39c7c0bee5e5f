// Decode GEMMs with quantized weights (src/launch/w4a16.h, src/launch/linear.h:
// sm90_w4a16_gemv and sm90_w4a16_skinny with INT4 and E4M3 weights) against
// the CPU reference (src/reference/w4a16_ref.h) on every shape of
// kDecodeShapes (the harness: w4a16_check.h). The variants of dev/ are tested
// by dev/tests/w4a16_dev_test.cpp.
//
// Weights and scales are drawn on the device (fresh seeds every run, so the
// 405B matrices cost no host packing); the reference unpacks a sample of tile
// groups (first, last and random ones: 128 channels each) and checks those
// columns; every output
// element is poisoned (0xff = NaN) before each launch and must come back finite.
// Errors: relative L2 per launch, bounds in tests/support/tolerances.h; the
// largest observed error per kernel family is printed at the end.
//
// Run under compute-sanitizer with --gtest_filter='W4A16Small.*' (small shapes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/w4a16_check.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_ops.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/linear.h"
#include "launch/stream.h"
#include "launch/w4a16.h"
#include "launch/w4a16_shapes.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/tolerances.h"

using namespace futr;
using cuda::DecodeConfig;
using cuda::DecodeKernel;
using cuda::DecodeShape;

using namespace test::w4a16;

// ---- full shape list -----------------------------------------------------------

TEST(W4A16, AllShapesHeuristic) {
  FUTR_REQUIRE_GPU();
  int i = 0;
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    Layer L = make_layer(true, s.n, s.k, s.group);
    const int odd = 3 + 2 * (i++ % 14);  // 3, 5, ..., 29: one odd M per shape, rotating
    for (int m : {1, 2, 8, 16, 17, 32, odd, 33, 64}) check(L, m, nullptr, name(s), test::tol::kW4A16);
  }
}

TEST(W4A16, EveryMOnLlama8B) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    if (std::string(s.model) != "Llama-3.1-8B") continue;
    Layer L = make_layer(true, s.n, s.k, s.group, 2);
    for (int m = 1; m <= 64; ++m) check(L, m, nullptr, name(s), test::tol::kW4A16);
  }
}

// Batch invariance: with the heuristic's configuration (one K split per
// (N, K) for every M), row i of a launch of M rows has the same bits as the
// same row launched alone or in any other M (gemv at M = 1, skinny above, two
// launches above 32), for the shapes of SmolLM2, Llama-3.2-1B and 3.1-8B.
TEST(W4A16, RowsAreTheSameBitsInEveryM) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    const std::string model = s.model;
    if (model != "SmolLM2-135M" && model != "Llama-3.2-1B" && model != "Llama-3.1-8B") continue;
    Layer L = make_layer(true, s.n, s.k, s.group, 1);
    const int splits = L.lin->config(1).splits, fold = L.lin->config(1).fold;
    for (int m = 2; m <= 64; ++m) {
      ASSERT_EQ(L.lin->config(m).splits, splits) << name(s) << " M " << m;
      ASSERT_EQ(L.lin->config(m).fold, fold) << name(s) << " M " << m;
    }
    const int M = 64;
    const auto x = random_x(M, s.k);
    cuda::DeviceBuffer<uint16_t> dx(x), all(size_t(M) * s.n), part(size_t(M) * s.n);
    L.lin->forward(dx.get(), all.get(), M, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    const auto want = all.download();
    for (int m : {1, 2, 3, 8, 9, 16, 17, 31, 32, 33}) {
      part.fill_bytes(0xff);
      L.lin->forward(dx.get(), part.get(), m, nullptr);
      FUTR_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = part.download();
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + ptrdiff_t(size_t(m) * s.n), want.begin()))
          << name(s) << ": the first " << m << " rows differ from the same rows in a launch of " << M;
    }
    for (int row : {5, 40}) {  // a row alone (the gemv) against its place in the launch of 64
      L.lin->forward(dx.get() + size_t(row) * s.k, part.get(), 1, nullptr);
      FUTR_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = part.download();
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + s.n, want.begin() + ptrdiff_t(size_t(row) * s.n)))
          << name(s) << ": row " << row << " alone";
    }
  }
}

// The gemv for M = 2..8 rows (the decode step's fused buckets) gives every row
// the bits of the heuristic's skinny launch of the same M and of the row
// alone, for the shapes of SmolLM2 and Llama-3.1-8B at their K split.
TEST(W4A16, GemvRowsAreTheSkinnyBits) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    const std::string model = s.model;
    if (model != "SmolLM2-135M" && model != "Llama-3.1-8B") continue;
    Layer L = make_layer(true, s.n, s.k, s.group, 1);
    const int M = cuda::kDecodeGemvMaxRows;
    const auto x = random_x(M, s.k);
    cuda::DeviceBuffer<uint16_t> dx(x), want(size_t(M) * s.n), got(size_t(M) * s.n), one(size_t(s.n));
    for (int m = 2; m <= M; ++m) {
      L.lin->forward(dx.get(), want.get(), m, nullptr);  // the heuristic: skinny
      ASSERT_EQ(L.lin->config(m).kernel, DecodeKernel::kSkinny) << name(s) << " M " << m;
      const DecodeConfig c = cuda::decode_as_gemv(L.lin->config(m));
      L.lin->reserve(c, m);
      got.fill_bytes(0xff);
      L.lin->forward(dx.get(), got.get(), m, c, nullptr);
      FUTR_CUDA_CHECK(cudaDeviceSynchronize());
      const auto w = want.download(), g = got.download();
      EXPECT_TRUE(std::equal(w.begin(), w.begin() + ptrdiff_t(size_t(m) * s.n), g.begin()))
          << name(s) << ": the gemv's " << m << " rows differ from the skinny kernel's";
    }
    L.lin->forward(dx.get() + size_t(M - 1) * s.k, one.get(), 1, nullptr);  // the last row alone
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    const auto o = one.download(), g = got.download();
    EXPECT_TRUE(std::equal(o.begin(), o.end(), g.begin() + ptrdiff_t(size_t(M - 1) * s.n)))
        << name(s) << ": row " << M - 1 << " of the gemv's " << M << " differs from the row alone";
  }
}

// Sequential splits (DecodeConfig::seq: a CTA per group of splits, or one CTA
// along K, folding the splits' sums in the reduction's order) give the split
// launch's bits, for INT4 (both group sizes) and E4M3 weights, several split
// counts, group sizes (the last group shorter too) and M.
TEST(W4A16, SequentialSplitsEqualTheSplitLaunch) {
  FUTR_REQUIRE_GPU();
  for (auto [int4, n, k, g] : {std::tuple{true, 960, 576, 64},
                               {true, 576, 1536, 64},
                               {true, 4096, 14336, 128},
                               {false, 960, 576, 0}}) {
    Layer L = make_layer(int4, n, k, g, 1);
    for (int m : {2, 9, 32}) {
      const auto x = random_x(m, k);
      cuda::DeviceBuffer<uint16_t> dx(x), want(size_t(m) * n), got(size_t(m) * n);
      for (int sp : {2, 3, 5})
        for (int fold : {0, 1, 2}) {
          DecodeConfig c = L.lin->config(m);
          c.kernel = DecodeKernel::kSkinny, c.splits = sp, c.fold = fold, c.seq = false;
          L.lin->reserve(c, m);
          L.lin->forward(dx.get(), want.get(), m, c, nullptr);
          c.seq = true;
          L.lin->reserve(c, m);
          got.fill_bytes(0xff);
          L.lin->forward(dx.get(), got.get(), m, c, nullptr);
          FUTR_CUDA_CHECK(cudaDeviceSynchronize());
          EXPECT_EQ(got.download(), want.download()) << (int4 ? "int4" : "e4m3") << " N " << n << " K " << k
                                                     << " M " << m << " splits " << sp << " fold " << fold;
        }
    }
  }
}

TEST(W8A16, AllShapes) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    Layer L = make_layer(false, s.n, s.k, s.group, 2);
    for (int m : {1, 4, 16, 32}) check(L, m, nullptr, name(s), test::tol::kW8A16);
  }
}

// Every compiled variant, with and without split-K, on a shape with a K tail
// (group 64) and one without.
TEST(W4A16, EveryCompiledVariant) {
  FUTR_REQUIRE_GPU();
  struct V {
    bool int4;
    int group;
    DecodeConfig c;
  };
  std::vector<V> vs;
  for (int g : {128, 64})
    for (int sp : {1, 5}) {
      DecodeConfig c;
      c.kernel = DecodeKernel::kGemv, c.tn = 1, c.loads = 4, c.splits = sp;
      vs.push_back({true, g, c});
    }
  for (auto [int4, g, mt, tn] : {std::tuple{true, 128, 1, 1},
                                 {true, 128, 2, 1},
                                 {true, 128, 2, 2},
                                 {true, 128, 4, 1},
                                 {true, 64, 1, 1},
                                 {true, 64, 2, 1},
                                 {true, 64, 4, 1},
                                 {false, 0, 1, 2},
                                 {false, 0, 2, 2},
                                 {false, 0, 4, 1}})
    for (int sp : {1, 3, 8}) {
      DecodeConfig c;
      c.kernel = DecodeKernel::kSkinny, c.mt = mt, c.tn = tn, c.splits = sp;
      vs.push_back({int4, g, c});
    }
  // A build of fewer formats (FUTR_W4A16_VARIANTS) runs what it has.
  std::erase_if(vs, [](const V& v) {
    return !cuda::decode_compiled(v.int4 ? cuda::DecodeWeights::kInt4 : cuda::DecodeWeights::kE4M3, v.group,
                                  v.c);
  });
  for (int g : {128, 64}) {
    const int n = 1024 + 16 * 5, k = g == 64 ? 1472 : 1536;  // N not a multiple of the CTA's columns
    Layer L4 = make_layer(true, n, k, g, 3);
    Layer L8 = make_layer(false, n, k, 0, 3);
    for (const V& v : vs) {
      if (v.int4 && v.group != g) continue;
      if (!v.int4 && g == 64) continue;
      Layer& L = v.int4 ? L4 : L8;
      const std::string what = std::string(v.int4 ? "int4" : "e4m3") + " " + std::to_string(n) + "x" +
                               std::to_string(k) + " g" + std::to_string(g);
      if (v.c.kernel == DecodeKernel::kGemv) {
        for (int m : {1, 3, 8}) check(L, m, &v.c, what, test::tol::kW4A16);
      } else {
        for (int m : v.c.mt == 1   ? std::vector<int>{1, 2, 8}
                     : v.c.mt == 2 ? std::vector<int>{9, 16}
                                   : std::vector<int>{17, 32})
          check(L, m, &v.c, what, v.int4 ? test::tol::kW4A16 : test::tol::kW8A16);
      }
    }
  }
}

// The split-K reduction re-arms its counters: graph replays give the same bits.
TEST(W4A16, GraphReplayIsDeterministic) {
  FUTR_REQUIRE_GPU();
  Layer L = make_layer(true, 4096, 4096, 128, 2);
  for (int m : {1, 8, 32}) {
    const auto x = random_x(m, 4096);
    cuda::DeviceBuffer<uint16_t> dx(x), eager(size_t(m) * 4096), replay(size_t(m) * 4096);
    cuda::Stream s;
    L.lin->forward(dx.get(), eager.get(), m, s);
    cuda::Graph g =
        cuda::Graph::capture(s, [&](cudaStream_t st) { L.lin->forward(dx.get(), replay.get(), m, st); });
    for (int r = 0; r < 3; ++r) {
      replay.fill_bytes(0xff, s);
      g.launch(s);
      s.sync();
      EXPECT_EQ(replay.download(), eager.download()) << "replay " << r << " M=" << m;
    }
  }
}

// Programmatic dependent launch: a chain of decode GEMMs where each one reads
// the previous one's output (x -> y1 -> y2 -> y3), captured with pdl=1, equals
// the same chain run eagerly without PDL, bit for bit, over several replays.
TEST(W4A16, PdlChainInGraphEqualsEager) {
  FUTR_REQUIRE_GPU();
  for (int m : {1, 8, 32, 40}) {
    std::vector<Layer> Ls;
    Ls.push_back(make_layer(true, 2048, 2048, 128, 1));
    Ls.push_back(make_layer(true, 8192, 2048, 128, 1));
    Ls.push_back(make_layer(true, 2048, 8192, 128, 1));
    const auto x = random_x(m, 2048);
    cuda::DeviceBuffer<uint16_t> dx(x), y1(size_t(m) * 2048), y2(size_t(m) * 8192), y3(size_t(m) * 2048);
    auto chain = [&](bool pdl, cudaStream_t st) {
      const void* in[3] = {dx.get(), y1.get(), y2.get()};
      void* out[3] = {y1.get(), y2.get(), y3.get()};
      for (int i = 0; i < 3; ++i) {
        DecodeConfig c = Ls[i].lin->config(m);
        c.pdl = pdl;
        Ls[i].lin->reserve(c, m);
        Ls[i].lin->forward(in[i], out[i], m, c, st);
      }
    };
    cuda::Stream s;
    chain(false, s);
    s.sync();
    const auto e1 = y1.download(), e3 = y3.download();
    cuda::Graph g = cuda::Graph::capture(s, [&](cudaStream_t st) { chain(true, st); });
    for (int r = 0; r < 3; ++r) {
      y1.fill_bytes(0xff, s), y2.fill_bytes(0xff, s), y3.fill_bytes(0xff, s);
      g.launch(s);
      s.sync();
      EXPECT_EQ(y1.download(), e1) << "PDL replay " << r << " M=" << m << " (first kernel)";
      EXPECT_EQ(y3.download(), e3) << "PDL replay " << r << " M=" << m
                                   << " (third kernel: reads PDL outputs)";
    }
  }
}

// The gemv with `splits` K slices for m rows, its workspace reserved; nullopt
// where the rows' x slices exceed what one launch stages (160 KB: refused).
static std::optional<DecodeConfig> gemv_with_splits(Layer& L, int splits, int m, int k, int group) {
  DecodeConfig c = L.lin->config(1);
  EXPECT_EQ(c.kernel, DecodeKernel::kGemv);
  c.splits = splits;
  if (cuda::decode_gemv_smem(c, m, k, group) > size_t(160) * 1024) return std::nullopt;
  L.lin->reserve(c, m);
  return c;
}

// The SwiGLU fused into the gemv's input staging (the decode step's down
// projection at M <= 8) equals the separate sm90_swiglu kernel followed by the
// plain gemv, bit for bit, for every split count and M = 1, 3, 8; the skinny
// kernel refuses it.
TEST(W4A16, GemvWithSwigluInputEqualsSwigluThenGemv) {
  FUTR_REQUIRE_GPU();
  for (auto [n, k, g] : {std::tuple{576, 1536, 64}, {4096, 14336, 128}}) {
    Layer L = make_layer(true, n, k, g, 1);
    const int M = cuda::kDecodeGemvMaxRows;
    const auto gu = random_x(M, 2 * k);
    cuda::DeviceBuffer<uint16_t> dgu(gu), s(size_t(M) * k), want(size_t(M) * n), got(size_t(M) * n);
    cuda::swiglu(dgu.get(), s.get(), M, k, nullptr);
    for (int m : {1, 3, M})
      for (int sp : {1, 2, 4, 8}) {
        const std::optional<DecodeConfig> c = gemv_with_splits(L, sp, m, k, g);
        if (!c) continue;
        L.lin->forward(s.get(), want.get(), m, *c, nullptr);
        got.fill_bytes(0xff);
        L.lin->forward(dgu.get(), got.get(), m, *c, nullptr, true);
        FUTR_CUDA_CHECK(cudaDeviceSynchronize());
        const auto w = want.download(), o = got.download();
        EXPECT_TRUE(std::equal(w.begin(), w.begin() + ptrdiff_t(size_t(m) * n), o.begin()))
            << "N " << n << " K " << k << " M " << m << " splits " << sp;
      }
    DecodeConfig skinny = L.lin->config(2);
    skinny.kernel = cuda::DecodeKernel::kSkinny;
    EXPECT_FUTR_ERROR(L.lin->forward(dgu.get(), got.get(), 2, skinny, nullptr, true),
                      "SwiGLU input is fused");
  }
}

// The residual add + RMSNorm fused into the gemv's input (the decode step's
// QKV and gate/up projections at M <= 8) against the separate kernel then the
// gemv: the stored residual x + add and y bit for bit (both sum the squares in
// one order: the decode step's batch invariance), for several split counts
// (every CTA must compute the same factors), M = 1, 2, 5, 8 and the shapes'
// hidden sizes.
TEST(W4A16, GemvWithNormInputMatchesRmsnormThenGemv) {
  FUTR_REQUIRE_GPU();
  std::mt19937 rng{12345u + uint32_t(std::random_device{}())};
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto [n, k, g] : {std::tuple{1728, 576, 64}, {6144, 4096, 128}, {2048, 8192, 128}}) {
    Layer L = make_layer(true, n, k, g, 1);
    for (int m : {1, 2, 5, cuda::kDecodeGemvMaxRows}) {
      std::vector<float> x(size_t(m) * k);
      for (float& v : x) v = 3.f * nd(rng);
      const auto add = random_x(m, k), gain = random_x(1, k);
      cuda::DeviceBuffer<float> dx(x), x_sep(x), x_out(size_t(m) * k);
      cuda::DeviceBuffer<uint16_t> dadd(add), dgain(gain), a(size_t(m) * k), want(size_t(m) * n),
          got(size_t(m) * n);
      cuda::RmsNormArgs rn;
      rn.x = x_sep.get(), rn.add = dadd.get(), rn.ld_add = k, rn.gain = dgain.get(), rn.out = a.get();
      rn.rows = m, rn.H = k, rn.eps = 1e-5f;
      cuda::rmsnorm(rn, nullptr);
      const cuda::DecodeNormInput ni{dx.get(), dadd.get(), dgain.get(), x_out.get(), 1e-5f};
      for (int sp : {1, 2, 5}) {
        const std::optional<DecodeConfig> c = gemv_with_splits(L, sp, m, k, g);
        if (!c) continue;
        L.lin->forward(a.get(), want.get(), m, *c, nullptr);
        x_out.fill_bytes(0xff);
        got.fill_bytes(0xff);
        L.lin->forward(nullptr, got.get(), m, *c, nullptr, false, &ni);
        FUTR_CUDA_CHECK(cudaDeviceSynchronize());
        const std::string what = "N " + std::to_string(n) + " K " + std::to_string(k) + " M " +
                                 std::to_string(m) + " splits " + std::to_string(sp);
        EXPECT_EQ(x_out.download(), x_sep.download()) << what << ": the stored residual";
        EXPECT_EQ(dx.download(), x) << what << ": the input residual must not change";
        EXPECT_EQ(got.download(), want.download()) << what << ": the output";
      }
      if (m == 2) {
        DecodeConfig skinny = L.lin->config(2);
        skinny.kernel = cuda::DecodeKernel::kSkinny;
        EXPECT_FUTR_ERROR(L.lin->forward(nullptr, got.get(), 2, skinny, nullptr, false, &ni),
                          "RMSNorm input");
      }
    }
  }
}

// ---- small set for compute-sanitizer (memcheck, racecheck) ----------------------

TEST(W4A16Small, GemvSkinnySplitK) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    if (std::string(s.model) != "SmolLM2-135M") continue;
    Layer L = make_layer(true, s.n, s.k, s.group, 2);
    for (int m : {1, 5, 16, 32}) check(L, m, nullptr, name(s), test::tol::kW4A16);
    DecodeConfig c;
    c.kernel = DecodeKernel::kSkinny, c.mt = 2, c.tn = 1, c.splits = 3;
    check(L, 9, &c, name(s) + " forced split", test::tol::kW4A16);
    c.seq = true;
    check(L, 9, &c, name(s) + " forced sequential split", test::tol::kW4A16);
  }
  Layer L = make_layer(true, 2048, 2048, 128, 2);
  for (int m : {1, 3, 32}) check(L, m, nullptr, "Llama-3.2-1B o", test::tol::kW4A16);
  Layer L8 = make_layer(false, 960, 576, 0, 2);
  for (int m : {1, 3, 20}) check(L8, m, nullptr, "SmolLM2-135M qkv e4m3", test::tol::kW8A16);
}

// The gemv's rows with its fused inputs (the RMSNorm and the SwiGLU) on
// SmolLM2's shapes, split and not, for compute-sanitizer: every staged byte
// is written before it is read, and nothing outside the operands is touched.
TEST(W4A16Small, GemvRowsWithFusedInputs) {
  FUTR_REQUIRE_GPU();
  const int H = 576, I = 1536, M = 5;
  Layer qkv = make_layer(true, 960, H, 64, 1), down = make_layer(true, H, I, 64, 1);
  std::vector<float> x(size_t(M) * H, 0.5f);
  const auto add = random_x(M, H), gain = random_x(1, H), gu = random_x(M, 2 * I);
  cuda::DeviceBuffer<float> dx(x), x_out(size_t(M) * H);
  cuda::DeviceBuffer<uint16_t> dadd(add), dgain(gain), dgu(gu), y(size_t(M) * 960), y2(size_t(M) * H);
  const cuda::DecodeNormInput ni{dx.get(), dadd.get(), dgain.get(), x_out.get(), 1e-5f};
  for (int sp : {1, 3}) {
    DecodeConfig c;
    c.kernel = DecodeKernel::kGemv, c.tn = 1, c.loads = 4, c.splits = sp;
    qkv.lin->reserve(c, M);
    down.lin->reserve(c, M);
    qkv.lin->forward(nullptr, y.get(), M, c, nullptr, false, &ni);
    down.lin->forward(dgu.get(), y2.get(), M, c, nullptr, true);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    for (uint16_t v : y.download()) ASSERT_TRUE(std::isfinite(bf16_to_float(v))) << "splits " << sp;
    for (uint16_t v : y2.download()) ASSERT_TRUE(std::isfinite(bf16_to_float(v))) << "splits " << sp;
  }
}

// ---- invalid requests fail loudly (host-side checks: no GPU needed) -------------

TEST(W4A16Invalid, ShapesAndConfigsAreRejected) {
  alignas(256) static uint8_t fake[256];  // never dereferenced: every case throws before launch
  auto args = [&](int m, int n, int k, int group) {
    cuda::DecodeArgs a;
    a.w = a.scales = a.x = fake;
    a.y = fake;
    a.m = m, a.n = n, a.k = k, a.group = group;
    return a;
  };
  DecodeConfig gemv;  // default: gemv tn=1 loads=4 splits=1
  DecodeConfig sk;
  sk.kernel = DecodeKernel::kSkinny, sk.mt = 1, sk.tn = 1, sk.splits = 1;
  auto rejects = [](auto&& f, const char* needle) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error for a request that should fail (" << needle << ")";
  };
  using cuda::DecodeWeights;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(0, 64, 128, 128), gemv, nullptr); }, "M = 0");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(65, 64, 128, 128), sk, nullptr); }, "M = 65");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 12, 128, 128), gemv, nullptr); }, "N = 12");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 64, 96, 64), gemv, nullptr); }, "K = 96");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 64, 128, 32), gemv, nullptr); },
          "group size 32");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 64, 576, 128), gemv, nullptr); }, "group 64");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(9, 64, 128, 128), gemv, nullptr); }, "M <= 8");
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(9, 64, 128, 128), sk, nullptr); },
          "needs mt >= 2");
  DecodeConfig bad = sk;
  bad.tn = 3;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(4, 64, 128, 128), bad, nullptr); },
          "nearest supported");
  DecodeConfig bad2 = gemv;
  bad2.loads = 3;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 64, 128, 128), bad2, nullptr); },
          "nearest supported: 'int4 g128 gemv tn=1 loads=4'");
  DecodeConfig bad3 = sk;
  bad3.tn = 4;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(4, 64, 576, 64), bad3, nullptr); },
          "nearest supported");
  DecodeConfig split = sk;
  split.splits = 4;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(4, 64, 1024, 128), split, nullptr); },
          "workspace");
  auto misaligned = args(1, 64, 128, 128);
  misaligned.x = fake + 2;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, misaligned, gemv, nullptr); }, "aligned");
  rejects([&] { cuda::apply_overrides(gemv, "tiles=3"); }, "unknown key");
  rejects([&] { cuda::apply_overrides(gemv, "kernel=fast"); }, "gemv, skinny, stream or sk");
  rejects([&] { cuda::apply_overrides(gemv, "pdl=2"); }, "expected 0 or 1");
}

TEST(W4A16Invalid, HeuristicStaysInsideTheCompiledList) {
  // Every heuristic choice for every listed shape and M names a compiled variant
  // (of the formats this build compiles: FUTR_W4A16_VARIANTS).
  const auto variants = cuda::decode_variants();
  auto format_compiled = [&](const std::string& prefix) {
    return std::any_of(variants.begin(), variants.end(),
                       [&](const std::string& v) { return v.rfind(prefix, 0) == 0; });
  };
  for (const DecodeShape& s : cuda::kDecodeShapes)
    for (int m = 1; m <= 64; ++m)
      for (auto [f, group] : {std::pair{cuda::DecodeWeights::kInt4, s.group},
                              {cuda::DecodeWeights::kInt4, 64},
                              {cuda::DecodeWeights::kE4M3, 0}}) {
        const DecodeConfig c = cuda::decode_heuristic(f, m, s.n, s.k, kH200SmCount, group);
        std::string want = f == cuda::DecodeWeights::kInt4 ? "int4 g" + std::to_string(group) : "e4m3";
        if (!format_compiled(want + " ")) continue;
        const std::string d = cuda::describe(c);
        want += " " + d.substr(0, std::min(d.find(" splits"), d.find(" ctas")));  // minus the grid
        EXPECT_NE(std::find(variants.begin(), variants.end(), want), variants.end())
            << name(s) << " M=" << m << ": heuristic picked '" << want << "', not compiled";
      }
}
