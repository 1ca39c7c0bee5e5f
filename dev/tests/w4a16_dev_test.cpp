// The decode GEMM variants of dev/ (dev/launch/w4a16_dev.cu, -DFUTR_DEV=ON):
// the stream kernel (dev/kernels/sm90_w4a16_stream.cuh), the stream-K gemv
// (dev/kernels/sm90_w4a16_sk.cuh) and the gemv / skinny tiles the heuristic
// never picks, against the CPU reference through the harness of
// tests/kernels/w4a16_test.cpp (w4a16_check.h). Small sets for
// compute-sanitizer: W4A16DevSmall.* and W4A16DevSmallStream.*.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/w4a16_check.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_ops.h"
#include "launch/device.h"
#include "launch/linear.h"
#include "launch/stream.h"
#include "launch/w4a16.h"
#include "launch/w4a16_shapes.h"
#include "support/gpu.h"
#include "support/tolerances.h"

using namespace futr;
using cuda::DecodeConfig;
using cuda::DecodeKernel;
using cuda::DecodeShape;
using namespace test::w4a16;

// Every dev variant, on a shape with a K tail (group 64) and one without.
TEST(W4A16Dev, EveryDevVariant) {
  FUTR_REQUIRE_GPU();
  struct V {
    bool int4;
    int group;
    DecodeConfig c;
  };
  std::vector<V> vs;
  for (auto [g, tn, u] : {std::tuple{128, 2, 4}, {128, 1, 8}, {64, 2, 4}})
    for (int sp : {1, 5}) {
      DecodeConfig c;
      c.kernel = DecodeKernel::kGemv, c.tn = tn, c.loads = u, c.splits = sp;
      vs.push_back({true, g, c});
    }
  for (int sp : {1, 3, 8}) {
    DecodeConfig c;
    c.kernel = DecodeKernel::kSkinny, c.mt = 1, c.tn = 2, c.splits = sp;
    vs.push_back({true, 128, c});
  }
  // Stream kernel: every variant with the resident grid and with grids that cut
  // the items into segments of every kind (one CTA for everything, groups
  // shared by 2..many CTAs, CTAs spanning several groups).
  for (auto [int4, g, mt, tn] : {std::tuple{true, 128, 1, 1},
                                 {true, 128, 2, 1},
                                 {true, 128, 4, 1},
                                 {true, 128, 4, 2},
                                 {true, 128, 1, 2},
                                 {true, 128, 2, 2},
                                 {true, 64, 1, 1},
                                 {true, 64, 2, 1},
                                 {true, 64, 4, 1},
                                 {false, 0, 1, 1},
                                 {false, 0, 2, 1},
                                 {false, 0, 4, 1}})
    for (auto [ctas, run] : {std::pair{0, 0}, {1, 0}, {7, 0}, {97, 0}, {0, 1}, {7, 3}, {97, 5}, {5, 40}}) {
      DecodeConfig c;
      c.kernel = DecodeKernel::kStream, c.mt = mt, c.tn = tn, c.ctas = ctas, c.run = run;
      vs.push_back({int4, g, c});
    }
  // The stream-K gemv (M <= 8): every batch size and grids that cut groups.
  for (int g : {128, 64})
    for (auto [u, nb] : {std::pair{2, 1}, {4, 1}, {4, 2}})
      for (int ctas : {0, 1, 7, 97}) {
        DecodeConfig c;
        c.kernel = DecodeKernel::kStreamK, c.loads = u, c.batches = nb, c.ctas = ctas;
        vs.push_back({true, g, c});
      }
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
        check(L, 1, &v.c, what, test::tol::kW4A16);
      } else if (v.c.kernel == DecodeKernel::kStreamK) {
        for (int m : {1, 2, 8}) check(L, m, &v.c, what, test::tol::kW4A16);
      } else {
        for (int m : v.c.mt == 1   ? std::vector<int>{1, 2, 8}
                     : v.c.mt == 2 ? std::vector<int>{9, 16}
                                   : std::vector<int>{17, 32})
          check(L, m, &v.c, what, v.int4 ? test::tol::kW4A16 : test::tol::kW8A16);
      }
    }
  }
}

// Programmatic dependent launch across kernels: the heuristic's kernel (gemv /
// skinny), the stream kernel, the heuristic's again, each reading the previous
// one's output, captured with pdl=1, equal the same chain run eagerly without
// PDL, bit for bit, over several replays.
TEST(W4A16Dev, PdlChainWithStreamInGraphEqualsEager) {
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
        DecodeConfig c = i == 1
                             ? cuda::decode_stream_heuristic(Ls[i].lin->format(), m, Ls[i].lin->n(),
                                                             Ls[i].lin->k(), cuda::require_device().sm_count)
                             : Ls[i].lin->config(m);
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

// The same for the stream-K kernel (sk, M <= 8): SwiGLU staged with x, bit for
// bit equal to the separate kernel then sk, for several grids and batch sizes.
TEST(W4A16Dev, StreamKWithSwigluInputEqualsSwigluThenStreamK) {
  FUTR_REQUIRE_GPU();
  for (auto [n, k, g] : {std::tuple{576, 1536, 64}, {4096, 14336, 128}}) {
    Layer L = make_layer(true, n, k, g, 1);
    for (int m : {1, 3, 8}) {
      const auto gu = random_x(m, 2 * k);
      cuda::DeviceBuffer<uint16_t> dgu(gu), s(static_cast<size_t>(m) * k), want(static_cast<size_t>(m) * n),
          got(static_cast<size_t>(m) * n);
      cuda::swiglu(dgu.get(), s.get(), m, k, nullptr);
      for (auto [u, nb, ctas] : {std::tuple{4, 1, 0}, {2, 1, 97}, {4, 2, 13}}) {
        DecodeConfig c;
        c.kernel = DecodeKernel::kStreamK, c.loads = u, c.batches = nb, c.ctas = ctas;
        L.lin->reserve(c, m);
        L.lin->forward(s.get(), want.get(), m, c, nullptr);
        L.lin->forward(dgu.get(), got.get(), m, c, nullptr, true);
        FUTR_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(got.download(), want.download())
            << "N " << n << " K " << k << " M " << m << " loads " << u << " ctas " << ctas;
      }
    }
  }
}

// ---- small sets for compute-sanitizer (memcheck, racecheck) ---------------------

TEST(W4A16DevSmall, StreamK) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    if (std::string(s.model) != "SmolLM2-135M") continue;
    Layer L = make_layer(true, s.n, s.k, s.group, 2);
    DecodeConfig sk;
    sk.kernel = DecodeKernel::kStreamK, sk.loads = 2, sk.ctas = 13;
    check(L, 1, &sk, name(s) + " sk 13 CTAs", test::tol::kW4A16);
    sk.loads = 4, sk.ctas = 0;
    check(L, 7, &sk, name(s) + " sk resident grid", test::tol::kW4A16);
    sk.batches = 2;
    check(L, 1, &sk, name(s) + " sk 2 batches", test::tol::kW4A16);
  }
}

// The stream kernel's small set: memcheck and synccheck run it; racecheck
// reports its bulk-copy (async proxy) writes against the consumers' reads of the
// previous use of the slot although the empty/full mbarriers order them
// (a false report), so racecheck runs W4A16DevSmall.* only.
TEST(W4A16DevSmallStream, RingsAndRuns) {
  FUTR_REQUIRE_GPU();
  for (const DecodeShape& s : cuda::kDecodeShapes) {
    if (std::string(s.model) != "SmolLM2-135M") continue;
    Layer L = make_layer(true, s.n, s.k, s.group, 2);
    DecodeConfig st;
    st.kernel = DecodeKernel::kStream, st.mt = 1, st.tn = 1, st.ctas = 11;
    check(L, 3, &st, name(s) + " stream 11 CTAs", test::tol::kW4A16);
    st.mt = 4, st.tn = 1, st.ctas = 3;
    check(L, 30, &st, name(s) + " stream 3 CTAs", test::tol::kW4A16);
    st.mt = 2, st.ctas = 4, st.run = 3;
    check(L, 12, &st, name(s) + " stream runs of 3", test::tol::kW4A16);
  }
}

// ---- invalid requests fail loudly (host-side checks: no GPU needed) -------------

TEST(W4A16DevInvalid, StreamConfigsAreRejected) {
  alignas(256) static uint8_t fake[256];  // never dereferenced: every case throws before launch
  auto args = [&](int m, int n, int k, int group) {
    cuda::DecodeArgs a;
    a.w = a.scales = a.x = fake;
    a.y = fake;
    a.m = m, a.n = n, a.k = k, a.group = group;
    return a;
  };
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
  DecodeConfig st;
  st.kernel = DecodeKernel::kStream, st.mt = 1, st.tn = 1;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 64, 1024, 128), st, nullptr); }, "workspace");
  DecodeConfig st3 = st;
  st3.tn = 3;
  rejects([&] { cuda::decode_gemm(DecodeWeights::kInt4, args(1, 64, 1024, 128), st3, nullptr); },
          "nearest supported: 'int4 g128 stream");
}
