// The persistent executor (src/launch/persistent_step.h): a chain of decode
// ops run by one launch of co-resident CTAs waiting on dependency counters
// gives the same bytes as the same ops launched one by one (the launch
// executor's kernels, each tested against its CPU reference), whatever the
// CTA count (1: every op in one CTA, in order; a few: several units per CTA;
// all that fit), launch after launch (the counters re-arm) and replayed from
// a CUDA graph. The chain is two one-row layers of the decode step's shape,
// each op reading what the one before wrote in the same launch:
//
//   x += y; a = RMSNorm(x) g1        a -> y        (O-like gemv, N = K = H)
//   x += y; a = RMSNorm(x) g2        a -> gu       (gate|up gemv, N = 2I)
//   gu -> y (gemv with the SwiGLU input, K = I);   gu -> sw (SwiGLU); sw -> y2
//
// and the same layers as the engine's one-row step runs its projections (the
// residual add + RMSNorm fused into the gemv, the residual alternating
// between two buffers), a list of gemvs only, which runs with either way of
// streaming the weights (registers, or a producer warp's shared-memory ring).
//
// Fresh random weights and inputs every run; the outputs poisoned (0xff)
// before each run, so a unit that read an input before it was written, or an
// output never written, shows as a difference. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/numeric.h"
#include "launch/buffer.h"
#include "launch/decode_ops.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/linear.h"
#include "launch/persistent_step.h"
#include "launch/stream.h"
#include "support/gpu.h"
#include "support/random.h"

using namespace futr;

namespace {

using test::rng;

// The activations of the chain (one row).
struct Acts {
  cuda::DeviceBuffer<float> x, x2;
  cuda::DeviceBuffer<uint16_t> a, y, y2, gu, sw;
  Acts(int H, int I) : x(H), x2(H), a(H), y(H), y2(H), gu(2 * size_t(I)), sw(I) {}
  // x and y from the host values, every output poisoned.
  void reset(const std::vector<float>& x0, const std::vector<uint16_t>& y0) {
    x.upload(x0);
    y.upload(y0);
    x2.fill_bytes(0xff);
    for (auto* b : {&a, &y2, &gu, &sw}) b->fill_bytes(0xff);
  }
};

struct Layer {
  std::unique_ptr<cuda::W4Linear> o, gate_up, down;
  cuda::DeviceBuffer<uint16_t> g1, g2;
};

std::unique_ptr<cuda::W4Linear> random_linear(int n, int k, int group) {
  auto lin = std::make_unique<cuda::W4Linear>(n, k, group);
  const uint64_t seed = rng()();
  cuda::fill_random(lin->weights(), cuda::FillType::kU8, size_t(n) * k / 2, seed, 0, 0, nullptr);
  cuda::fill_random(lin->scales(), cuda::FillType::kF16, size_t(n) * (k / group), seed + 1, 0.002f, 0.02f,
                    nullptr);
  return lin;
}

std::vector<uint16_t> random_bf16(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = float_to_bf16(u(rng()));
  return v;
}

// The chain's ops, in order, for either executor: norm(add) and gemm(lin, in,
// out, swiglu) and swiglu(in, out).
template <class Norm, class Gemm, class Swiglu>
void chain(const std::vector<Layer>& layers, Acts& m, Norm norm, Gemm gemm, Swiglu swiglu) {
  for (const Layer& L : layers) {
    norm(L.g1.get());
    gemm(*L.o, m.a.get(), m.y.get(), false);
    norm(L.g2.get());
    gemm(*L.gate_up, m.a.get(), m.gu.get(), false);
    gemm(*L.down, m.gu.get(), m.y.get(), true);
    swiglu(m.gu.get(), m.sw.get());
    gemm(*L.down, m.sw.get(), m.y2.get(), false);
  }
}

// The one-row decode step's projections as the engine runs them (the
// residual add + RMSNorm fused into the gemv, x alternating with x2):
//   a' = norm(x + y) g1 (x2 = x + y) -> gu-like "qkv" into a;  a -> y (o);
//   norm(x2 + y) g2 (x = x2 + y) -> gu;  gu -> y (down, the SwiGLU input).
template <class Gemm>
void fused_chain(const std::vector<Layer>& layers, Acts& m, Gemm gemm) {
  for (const Layer& L : layers) {
    const cuda::DecodeNormInput n1{m.x.get(), m.y.get(), L.g1.get(), m.x2.get(), 1e-5f};
    gemm(*L.o, nullptr, m.a.get(), false, &n1);
    gemm(*L.o, m.a.get(), m.y.get(), false, nullptr);
    const cuda::DecodeNormInput n2{m.x2.get(), m.y.get(), L.g2.get(), m.x.get(), 1e-5f};
    gemm(*L.gate_up, nullptr, m.gu.get(), false, &n2);
    gemm(*L.down, m.gu.get(), m.y.get(), true, nullptr);
  }
}

cuda::RmsNormArgs norm_args(Acts& m, const void* gain, int H) {
  cuda::RmsNormArgs n;
  n.x = m.x.get();
  n.add = m.y.get();
  n.ld_add = H;
  n.gain = gain;
  n.out = m.a.get();
  n.rows = 1;
  n.H = H;
  return n;
}

struct Result {
  std::vector<float> x, x2;
  std::vector<uint16_t> a, y, y2, gu, sw;
  bool operator==(const Result& o) const {
    auto same = [](const auto& p, const auto& q) {
      return p.size() == q.size() && std::memcmp(p.data(), q.data(), p.size() * sizeof(p[0])) == 0;
    };
    return same(x, o.x) && same(x2, o.x2) && same(a, o.a) && same(y, o.y) && same(y2, o.y2) &&
           same(gu, o.gu) && same(sw, o.sw);
  }
};
Result download(const Acts& m) {
  return {m.x.download(),  m.x2.download(), m.a.download(), m.y.download(),
          m.y2.download(), m.gu.download(), m.sw.download()};
}

void run_shape(int H, int I, int group) {
  SCOPED_TRACE(testing::Message() << "H " << H << " I " << I << " group " << group);
  const int sms = cuda::require_device().sm_count;
  std::vector<Layer> layers(2);
  for (Layer& L : layers) {
    L.o = random_linear(H, H, group);
    L.gate_up = random_linear(2 * I, H, group);
    L.down = random_linear(H, I, group);
    L.g1 = cuda::DeviceBuffer<uint16_t>(random_bf16(H, 0.5f, 1.5f));
    L.g2 = cuda::DeviceBuffer<uint16_t>(random_bf16(H, 0.5f, 1.5f));
  }
  std::vector<float> x0(H);
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& v : x0) v = d(rng());
  const std::vector<uint16_t> y0 = random_bf16(H, -1.f, 1.f);
  cuda::Stream st;
  auto config = [&](const cuda::W4Linear& lin) {
    return cuda::linear_config(cuda::DecodeWeights::kInt4, 1, lin.n(), lin.k(), sms, group);
  };

  // The launch executor's way: one launch per op.
  Acts ref(H, I);
  ref.reset(x0, y0);
  chain(
      layers, ref, [&](const void* g) { cuda::rmsnorm(norm_args(ref, g, H), st); },
      [&](const cuda::W4Linear& lin, const void* in, void* out, bool sw) {
        lin.forward(in, out, 1, config(lin), st, sw);
      },
      [&](const void* gu, void* out) { cuda::swiglu(gu, out, 1, I, st); });
  st.sync();
  const Result want = download(ref);

  // The persistent executor over its own activations.
  Acts m(H, I);
  cuda::PersistentStep step;
  chain(
      layers, m, [&](const void* g) { step.rmsnorm(norm_args(m, g, H)); },
      [&](const cuda::W4Linear& lin, const void* in, void* out, bool sw) {
        step.gemm(lin.args(in, out, 1, sw), config(lin));
      },
      [&](const void* gu, void* out) { step.swiglu(gu, out, 1, I); });
  ASSERT_EQ(step.size(), 14);
  EXPECT_FALSE(step.ring());  // norms and SwiGLU: the register kernel
  const int resident = step.resident_ctas();
  for (int ctas : {1, 3, 37, resident}) {
    for (int rep = 0; rep < 2; ++rep) {  // the second launch starts from the re-armed counters
      m.reset(x0, y0);
      step.launch(st, ctas);
      st.sync();
      EXPECT_TRUE(download(m) == want) << ctas << " CTAs, launch " << rep;
    }
  }
  // The fused chain: the gemv's own RMSNorm input reads the residual other
  // CTAs of the launch wrote.
  Acts fref(H, I), fm(H, I);
  fref.reset(x0, y0);
  fused_chain(layers, fref,
              [&](const cuda::W4Linear& lin, const void* in, void* out, bool sw,
                  const cuda::DecodeNormInput* n) { lin.forward(in, out, 1, config(lin), st, sw, n); });
  st.sync();
  const Result fwant = download(fref);
  // Both ways of streaming the gemv's weights (each unit its own in
  // registers; a producer warp's shared-memory ring), launch after launch.
  const std::pair<cuda::PersistentWeights, int> ways[] = {{cuda::PersistentWeights::kRing, 0},
                                                          {cuda::PersistentWeights::kRing, 1},
                                                          {cuda::PersistentWeights::kRegisters, 0}};
  for (const auto& [weights, per_sm] : ways) {
    const bool ring = weights == cuda::PersistentWeights::kRing;
    SCOPED_TRACE(testing::Message() << (ring ? "ring" : "registers") << ", CTAs per SM " << per_sm);
    cuda::PersistentStep fstep(weights, per_sm);
    fused_chain(
        layers, fm,
        [&](const cuda::W4Linear& lin, const void* in, void* out, bool sw, const cuda::DecodeNormInput* n) {
          fstep.gemm(lin.args(in, out, 1, sw, n), config(lin));
        });
    EXPECT_EQ(fstep.ring(), ring);
    if (ring) {
      EXPECT_GE(fstep.ring_stages(), 2);
    }
    for (int ctas : {1, 5, fstep.resident_ctas()}) {
      for (int rep = 0; rep < 2; ++rep) {
        fm.reset(x0, y0);
        fstep.launch(st, ctas);
        st.sync();
        EXPECT_TRUE(download(fm) == fwant)
            << "fused chain, " << (ring ? "ring" : "registers") << ", " << ctas << " CTAs, launch " << rep;
      }
    }
    cuda::Graph fg = cuda::Graph::capture(st, [&](cudaStream_t s) { fstep.launch(s); });
    for (int rep = 0; rep < 2; ++rep) {
      fm.reset(x0, y0);
      fg.launch(st);
      st.sync();
      EXPECT_TRUE(download(fm) == fwant)
          << "fused chain, " << (ring ? "ring" : "registers") << ", graph replay " << rep;
    }
  }
  // One graph holds the launch: replays give the same bytes.
  cuda::Graph g = cuda::Graph::capture(st, [&](cudaStream_t s) { step.launch(s); });
  for (int rep = 0; rep < 3; ++rep) {
    m.reset(x0, y0);
    g.launch(st);
    st.sync();
    EXPECT_TRUE(download(m) == want) << "graph replay " << rep;
  }
}

TEST(PersistentStep, ChainEqualsTheLaunchesSmolLM2Shape) {
  FUTR_REQUIRE_GPU();
  run_shape(576, 1536, 64);
}

TEST(PersistentStep, ChainEqualsTheLaunchesLlama8BShape) {
  FUTR_REQUIRE_GPU();
  run_shape(4096, 14336, 128);
}

TEST(PersistentStep, RefusesWhatItCannotRun) {
  FUTR_REQUIRE_GPU();
  cuda::PersistentStep step;
  EXPECT_THROW(step.launch(nullptr), Error);  // no ops
  auto lin = random_linear(64, 128, 64);
  cuda::DeviceBuffer<uint16_t> x(128 * 2), y(64 * 2);
  const cuda::DecodeConfig skinny =
      cuda::linear_config(cuda::DecodeWeights::kInt4, 2, 64, 128, cuda::require_device().sm_count, 64);
  EXPECT_THROW(step.gemm(lin->args(x.get(), y.get(), 2), skinny), Error);  // not the one-row gemv
  const cuda::DecodeConfig gemv =
      cuda::linear_config(cuda::DecodeWeights::kInt4, 1, 64, 128, cuda::require_device().sm_count, 64);
  step.gemm(lin->args(x.get(), y.get(), 1), gemv);
  EXPECT_THROW(step.launch(nullptr, step.resident_ctas() + 1), Error);  // not all resident
}

}  // namespace
