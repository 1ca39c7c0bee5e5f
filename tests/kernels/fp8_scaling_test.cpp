// FP8 activations of the prefill path (src/launch/fp8_scaling.h) against their
// CPU references on fresh random data:
//
//   - sm90_fp8_quantize against ref::fp8_quantize_rows: plain rows byte for
//     byte (E4M3 codes, amax, saturated and non-finite counts); rows with the
//     folded RMSNorm normalized in the cast: the row factor comes from an
//     FP32 sum on the GPU and a float64 one in the reference, so a code may
//     differ by one step where bf16(x r) sits on a rounding boundary (counted,
//     bounded); K from 64 to 16384, scales that saturate some values;
//   - sm90_fp8_scale_update against quant::DelayedScale (policy "clamp") on
//     the same call records, bit for bit: scales and every counter, through
//     all-zero calls, non-finite calls, a sudden jump and the window ageing
//     out; and quantize + update chained over calls against the reference
//     state machine fed with the reference's records.
// Host-only tests (run everywhere): the refusals.
// Run under compute-sanitizer with --gtest_filter='Fp8ScalingSmall.*'.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/numeric.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/fp8_scaling.h"
#include "quant/delayed_scaling.h"
#include "reference/fp8_scaling_ref.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/random.h"

using namespace futr;

namespace {

using test::rng;

// Rows ~ N(0, sd) with a few outliers (x 100), as a residual stream has.
std::vector<uint16_t> rows_bf16(size_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<uint16_t> x(n);
  for (auto& v : x) v = float_to_bf16(d(rng()) * (u(rng()) < 0.002f ? 100.0f : 1.0f));
  return x;
}

cuda::Fp8SiteState read_site(const cuda::DeviceScaleBank& bank, int i) {
  cuda::Fp8SiteState s;
  FUTR_CUDA_CHECK(cudaMemcpy(&s, bank.site(i), sizeof(s), cudaMemcpyDeviceToHost));
  return s;
}

void expect_state_equal(const cuda::DeviceScaleBank::Snapshot& got, const quant::DelayedScale& want,
                        int call) {
  EXPECT_EQ(std::bit_cast<uint32_t>(got.scale), std::bit_cast<uint32_t>(want.scale()))
      << "call " << call << ": scale " << got.scale << " vs " << want.scale();
  const quant::ScaleStats& w = want.stats();
  EXPECT_EQ(got.stats.calls, w.calls) << "call " << call;
  EXPECT_EQ(got.stats.saturated_calls, w.saturated_calls) << "call " << call;
  EXPECT_EQ(got.stats.saturated_values, w.saturated_values) << "call " << call;
  EXPECT_EQ(got.stats.zero_calls, w.zero_calls) << "call " << call;
  EXPECT_EQ(got.stats.nonfinite_calls, w.nonfinite_calls) << "call " << call;
  EXPECT_EQ(got.stats.max_amax, w.max_amax) << "call " << call;
}

// One quantize call of `rows` x K against the reference; returns the reference record.
ref::Fp8QuantizeResult check_quantize(int rows, int K, bool fold, float scale_amax) {
  quant::DelayedScalingConfig cfg;
  const float init[1] = {scale_amax};
  cuda::DeviceScaleBank bank(cfg, init);
  const float s = quant::next_scale(scale_amax, cfg.margin);
  const int64_t ld = K + 8;  // rows of a wider buffer
  const auto x = rows_bf16(size_t(rows) * size_t(ld), 1.0f);
  cuda::DeviceBuffer<uint16_t> dx(x);
  cuda::DeviceBuffer<uint8_t> dq(size_t(rows) * size_t(K));
  dq.fill_bytes(0x55);
  cuda::Fp8QuantizeArgs a;
  a.x = dx.get(), a.ld_x = ld, a.out = dq.get(), a.rows = rows, a.K = K, a.fold_rms = fold,
  a.site = bank.site(0);
  cuda::fp8_quantize_rows(a, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  const ref::Fp8QuantizeResult want = ref::fp8_quantize_rows(x.data(), ld, rows, K, fold, a.eps, s);
  const std::vector<uint8_t> got = dq.download();
  const cuda::Fp8SiteState st = read_site(bank, 0);
  size_t diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want.q[i]) continue;
    ++diff;
    // One E4M3 step apart, same sign (codes of the same sign are monotone).
    EXPECT_TRUE(fold && (got[i] & 0x80) == (want.q[i] & 0x80) &&
                std::abs(int(got[i] & 0x7f) - int(want.q[i] & 0x7f)) == 1)
        << "element " << i << ": " << int(got[i]) << " vs " << int(want.q[i]) << " (K " << K << ")";
  }
  if (!fold) {
    EXPECT_EQ(diff, 0u);
    EXPECT_EQ(st.amax, want.amax);
    EXPECT_EQ(st.saturated, want.saturated);
  } else {
    EXPECT_LE(double(diff), 1e-3 * double(got.size()) + 2) << "codes off by one step (row factor ulp)";
    EXPECT_NEAR(st.amax, want.amax, 1e-2f * want.amax);
    EXPECT_NEAR(double(st.saturated), double(want.saturated), 2.0 + 1e-3 * double(got.size()));
  }
  EXPECT_EQ(st.nonfinite, want.nonfinite);
  return want;
}

TEST(Fp8ScalingHost, Refusals) {
  quant::DelayedScalingConfig cfg;
  cfg.policy = Fp8SaturationPolicy::kRecompute;
  const float init[1] = {1.0f};
  EXPECT_FUTR_ERROR(cuda::DeviceScaleBank(cfg, init), "only the \"clamp\" saturation policy");
  cfg.policy = Fp8SaturationPolicy::kClampRescale;
  const float bad[1] = {0.0f};
  EXPECT_FUTR_ERROR(cuda::DeviceScaleBank(cfg, bad), "initial amax 0 of site 0");
  cuda::Fp8QuantizeArgs a;
  a.K = 12;
  EXPECT_FUTR_ERROR(cuda::fp8_quantize_rows(a, nullptr), "K 12 must be a multiple of 8");
}

TEST(Fp8ScalingSmall, QuantizeMatchesTheReference) {
  FUTR_REQUIRE_GPU();
  for (bool fold : {false, true}) {
    check_quantize(1, 64, fold, 4.0f);   // most values fit
    check_quantize(7, 576, fold, 2.0f);  // outliers saturate
  }
}

TEST(Fp8Scaling, QuantizeShapes) {
  FUTR_REQUIRE_GPU();
  for (bool fold : {false, true})
    for (int K : {1024, 4096, 14336, 16384}) check_quantize(33, K, fold, fold ? 30.0f : 8.0f);
}

TEST(Fp8ScalingSmall, NonFiniteValuesAreCounted) {
  FUTR_REQUIRE_GPU();
  quant::DelayedScalingConfig cfg;
  const float init[1] = {1.0f};
  cuda::DeviceScaleBank bank(cfg, init);
  std::vector<uint16_t> x(2 * 64, float_to_bf16(0.5f));
  x[3] = 0x7fc0;   // NaN
  x[70] = 0x7f80;  // +inf
  cuda::DeviceBuffer<uint16_t> dx(x);
  cuda::DeviceBuffer<uint8_t> dq(x.size());
  cuda::Fp8QuantizeArgs a;
  a.x = dx.get(), a.out = dq.get(), a.rows = 2, a.K = 64, a.site = bank.site(0);
  cuda::fp8_quantize_rows(a, nullptr);
  bank.update(0, 1, nullptr);
  const auto snap = bank.download();
  EXPECT_EQ(snap[0].stats.nonfinite_calls, 1u);
  EXPECT_EQ(snap[0].scale, quant::next_scale(1.0f, cfg.margin)) << "a non-finite call leaves the scale";
  const auto q = dq.download();
  EXPECT_EQ(q[3], 0x7f);   // NaN stays NaN
  EXPECT_EQ(q[70], 0x7e);  // +inf saturates to 448
}

// The update rule on injected records, against the CPU state machine.
TEST(Fp8ScalingSmall, UpdateFollowsTheStateMachine) {
  FUTR_REQUIRE_GPU();
  quant::DelayedScalingConfig cfg;
  cfg.history = 4;
  cfg.margin = 1.5f;
  cfg.initial_amax = 3.0f;
  const float init[2] = {3.0f, 100.0f};
  cuda::DeviceScaleBank bank(cfg, init);
  quant::DelayedScale want0(cfg);
  quant::DelayedScalingConfig c1 = cfg;
  c1.initial_amax = 100.0f;
  quant::DelayedScale want1(c1);
  struct Rec {
    float amax;
    uint32_t sat, bad;
  };
  // Zero calls (the scale stays), a jump (saturates once), non-finite (ignored),
  // then small values until the jump ages out of the 4-call window.
  const Rec recs[] = {{2.0f, 0, 0},   {0.0f, 0, 0}, {0.0f, 0, 0},   {5e3f, 17, 0},
                      {1.0f, 0, 0},   {NAN, 0, 2},  {0.5f, 0, 0},   {0.25f, 0, 0},
                      {0.125f, 0, 0}, {0.1f, 0, 0}, {1e-30f, 0, 0}, {3e38f, 9, 0}};
  int call = 0;
  for (const Rec& r : recs) {
    for (int site = 0; site < 2; ++site) {
      cuda::Fp8SiteState s = read_site(bank, site);
      s.amax = r.amax * (site + 1);
      s.saturated = r.sat;
      s.nonfinite = r.bad;
      FUTR_CUDA_CHECK(cudaMemcpy(bank.site(site), &s, sizeof(s), cudaMemcpyHostToDevice));
    }
    bank.update(0, 2, nullptr);
    const auto snap = bank.download();
    for (int site = 0; site < 2; ++site) {
      quant::DelayedScale& w = site ? want1 : want0;
      w.record(r.bad ? NAN : r.amax * (site + 1), r.sat);
      expect_state_equal(snap[size_t(site)], w, call);
      const cuda::Fp8SiteState s = read_site(bank, site);
      EXPECT_EQ(s.amax, 0.0f);  // the record is cleared for the next call
      EXPECT_EQ(s.saturated, 0u);
      EXPECT_EQ(s.nonfinite, 0u);
    }
    ++call;
  }
  bank.reset();
  EXPECT_EQ(bank.download()[1].scale, quant::next_scale(100.0f, cfg.margin));
  EXPECT_EQ(bank.download()[1].stats.calls, 0u);
}

// Quantize + update chained over calls whose range moves, against the CPU state
// machine fed with the reference's records (plain rows: exact records).
TEST(Fp8Scaling, ChainedCallsFollowTheReference) {
  FUTR_REQUIRE_GPU();
  quant::DelayedScalingConfig cfg;
  cfg.history = 3;
  cfg.initial_amax = 8.0f;
  const float init[1] = {cfg.initial_amax};
  cuda::DeviceScaleBank bank(cfg, init);
  quant::DelayedScale want(cfg);
  const int rows = 16, K = 512;
  for (int call = 0; call < 10; ++call) {
    const float sd = call == 4 ? 500.0f : (call == 7 ? 0.0f : 1.0f + call);  // a jump, then all zeros
    std::vector<uint16_t> x = rows_bf16(size_t(rows) * K, sd == 0.0f ? 1.0f : sd);
    if (sd == 0.0f) std::fill(x.begin(), x.end(), uint16_t(0));
    cuda::DeviceBuffer<uint16_t> dx(x);
    cuda::DeviceBuffer<uint8_t> dq(x.size());
    cuda::Fp8QuantizeArgs a;
    a.x = dx.get(), a.out = dq.get(), a.rows = rows, a.K = K, a.site = bank.site(0);
    cuda::fp8_quantize_rows(a, nullptr);
    bank.update(0, 1, nullptr);
    const ref::Fp8QuantizeResult r = ref::fp8_quantize_rows(x.data(), K, rows, K, false, a.eps, want.scale());
    EXPECT_EQ(dq.download(), r.q) << "call " << call << " with scale " << want.scale();
    want.record(r.amax, r.saturated);
    expect_state_equal(bank.download()[0], want, call);
  }
  EXPECT_GE(want.stats().saturated_calls, 1u) << "the jump saturated once";
  EXPECT_EQ(want.stats().zero_calls, 1u);
}

}  // namespace
