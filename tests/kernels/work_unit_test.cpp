// The work-unit contract (src/kernels/work_unit.h): each op's body run by a
// stand-in persistent executor (tests/kernels/work_unit_loop.h: a few CTAs
// each looping over several units, in another order than blockIdx, shared
// memory of the caller's own, no-op dependencies) gives the same bytes as the
// launch executor's one-CTA-per-unit kernel. Ops: RMSNorm (add mode), SwiGLU,
// the logits reductions, top-k sampling, the LM head. Fresh random inputs
// every run; outputs poisoned (0xff) before each run. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "launch/buffer.h"
#include "launch/decode_ops.h"
#include "launch/lm_head.h"
#include "launch/stream.h"
#include "support/gpu.h"
#include "support/random.h"
#include "work_unit_loop.h"

using namespace futr;

namespace {

using test::rng;

std::vector<float> randn(size_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng());
  return x;
}

template <class T>
void expect_same_bytes(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(T))) << what;
}

constexpr int kCtas[] = {1, 3, 7};

TEST(WorkUnit, RmsNormLoopEqualsLaunch) {
  FUTR_REQUIRE_GPU();
  for (int H : {576, 4096}) {
    const int rows = 32;
    const std::vector<float> x = randn(size_t(rows) * H, 1.f);
    const std::vector<uint16_t> add = test::randn_bf16(size_t(rows) * H, 1.f);
    const std::vector<uint16_t> gain = test::randn_bf16(static_cast<size_t>(H), 1.f);
    cuda::Stream st;
    cuda::DeviceBuffer<uint16_t> d_add(add), d_gain(gain);
    auto run = [&](int ctas) {  // ctas 0: the launcher
      cuda::DeviceBuffer<float> d_x(x);
      cuda::DeviceBuffer<uint16_t> d_out(size_t(rows) * H);
      d_out.fill_bytes(0xff);
      cuda::RmsNormArgs a;
      a.x = d_x.get();
      a.add = d_add.get();
      a.ld_add = H;
      a.gain = d_gain.get();
      a.out = d_out.get();
      a.rows = rows;
      a.H = H;
      if (ctas == 0) cuda::rmsnorm(a, st);
      else test::loop_rmsnorm(a, ctas, st);
      std::vector<uint16_t> out = d_out.download(st);
      std::vector<float> xs = d_x.download(st);
      return std::make_pair(out, xs);
    };
    const auto want = run(0);
    for (int ctas : kCtas) {
      const auto got = run(ctas);
      expect_same_bytes(got.first, want.first, "RMSNorm output");
      expect_same_bytes(got.second, want.second, "residual");
    }
  }
}

TEST(WorkUnit, SwigluLoopEqualsLaunch) {
  FUTR_REQUIRE_GPU();
  const int rows = 8, I = 1536;
  const std::vector<uint16_t> gu = test::randn_bf16(size_t(rows) * 2 * I, 2.f);
  cuda::Stream st;
  cuda::DeviceBuffer<uint16_t> d_gu(gu), d_out(size_t(rows) * I);
  d_out.fill_bytes(0xff);
  cuda::swiglu(d_gu.get(), d_out.get(), rows, I, st);
  const std::vector<uint16_t> want = d_out.download(st);
  for (int ctas : kCtas) {
    d_out.fill_bytes(0xff);
    test::loop_swiglu(d_gu.get(), d_out.get(), rows, I, (rows * I + 255) / 256, ctas, st);
    expect_same_bytes(d_out.download(st), want, "SwiGLU");
  }
}

TEST(WorkUnit, LogitsReduceAndSampleLoopEqualLaunch) {
  FUTR_REQUIRE_GPU();
  const int rows = 32, vocab = 49152;
  const std::vector<float> z = randn(size_t(rows) * vocab, 3.f);
  std::vector<int> targets(static_cast<size_t>(rows));
  std::vector<cuda::SampleRow> samplers(static_cast<size_t>(rows));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int r = 0; r < rows; ++r) {
    targets[size_t(r)] = r % 3 == 0 ? -1 : int(rng()() % uint64_t(vocab));
    cuda::SampleRow& s = samplers[size_t(r)];
    s.u = u01(rng());
    s.temperature = 0.7f;
    s.top_p = r % 2 ? 0.9f : 1.f;
    s.min_p = r % 4 == 1 ? 0.05f : 0.f;
    s.top_k = r % 5 == 4 ? 0 : 1 + int(rng()() % 1024u);
  }
  cuda::Stream st;
  cuda::DeviceBuffer<float> d_z(z);
  cuda::DeviceBuffer<int> d_t(targets), d_tok(static_cast<size_t>(rows));
  cuda::DeviceBuffer<cuda::SampleRow> d_s(samplers);
  cuda::DeviceBuffer<cuda::LogitsRowStats> d_stats(static_cast<size_t>(rows));
  cuda::LogitsReduceArgs ra;
  ra.logits = d_z.get();
  ra.vocab = vocab;
  ra.rows = rows;
  ra.targets = d_t.get();
  ra.out = d_stats.get();
  cuda::SampleArgs sa;
  sa.logits = d_z.get();
  sa.vocab = vocab;
  sa.rows = rows;
  sa.samplers = d_s.get();
  sa.out = d_tok.get();
  d_stats.fill_bytes(0xff);
  d_tok.fill_bytes(0xff);
  cuda::logits_reduce(ra, st);
  cuda::sample_topk(sa, st);
  const std::vector<cuda::LogitsRowStats> want_stats = d_stats.download(st);
  const std::vector<int> want_tok = d_tok.download(st);
  for (int ctas : kCtas) {
    d_stats.fill_bytes(0xff);
    d_tok.fill_bytes(0xff);
    test::loop_logits_reduce(ra, ctas, st);
    test::loop_sample_topk(sa, ctas, st);
    expect_same_bytes(d_stats.download(st), want_stats, "logits reductions");
    expect_same_bytes(d_tok.download(st), want_tok, "sampled tokens");
  }
}

TEST(WorkUnit, LmHeadLoopEqualsLaunch) {
  FUTR_REQUIRE_GPU();
  const int n = 49152, k = 576;
  const std::vector<uint16_t> w = test::randn_bf16(size_t(n) * k, 0.05f);
  cuda::Stream st;
  cuda::DeviceBuffer<uint16_t> d_w(w);
  for (int m : {1, 9, 32}) {
    const std::vector<uint16_t> x = test::randn_bf16(size_t(m) * k, 1.f);
    cuda::DeviceBuffer<uint16_t> d_x(x);
    cuda::DeviceBuffer<float> d_out(size_t(m) * n);
    const cuda::LmHeadArgs a{d_w.get(), d_x.get(), d_out.get(), 0, m, n, k};
    d_out.fill_bytes(0xff);
    cuda::lm_head(a, st);
    const std::vector<float> want = d_out.download(st);
    for (int ctas : kCtas) {
      d_out.fill_bytes(0xff);
      test::loop_lm_head(a, ctas, st);
      expect_same_bytes(d_out.download(st), want, "LM head");
    }
  }
}

}  // namespace
