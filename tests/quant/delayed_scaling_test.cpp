// Delayed FP8 scaling (src/quant/delayed_scaling.h): each case of the state
// machine (initial scale, all-zero tensors, non-finite amax, saturation
// counters and both policies, a sudden jump in range and its ageing out,
// separate state per request group) and the E4M3 quantizer the device
// epilogue mirrors.
#include "quant/delayed_scaling.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "core/numeric.h"
#include "quant/quant_test_util.h"

using namespace futr;
using namespace futr::quant;

namespace {

// One "call": quantize x with the state's scale, record, follow the policy.
Fp8QuantStats call(DelayedScale& st, const std::vector<float>& x, std::vector<float>* out = nullptr,
                   bool* recomputed = nullptr) {
  std::vector<float> q(x.size());
  Fp8QuantStats s = quantize_e4m3_scaled(x, st.scale(), q);
  const auto action = st.record(s.amax, s.saturated);
  if (recomputed) *recomputed = action == DelayedScale::Action::kRecompute;
  if (action == DelayedScale::Action::kRecompute) {
    const Fp8QuantStats again = quantize_e4m3_scaled(x, st.scale(), q);
    st.record_rerun(again.amax, again.saturated);
  }
  if (out) {
    for (auto& v : q) v *= st.scale();
    *out = q;
  }
  return s;
}

std::vector<float> ramp(size_t n, float amax) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = amax * (float(i) / float(n - 1)) * (i % 2 ? -1.0f : 1.0f);
  v[n - 1] = amax;
  return v;
}

}  // namespace

// The bound of normalized rows holds for the worst row (one value, the rest
// zero: |x_k| / rms = sqrt(K) exactly before rounding), for rows of mixed
// magnitude, and with the BF16 rounding of x / rms; and it is tight (the worst row reaches it within 1%).
TEST(DelayedScaling, NormalizedRowsStayWithinTheirBound) {
  for (int K : {64, 576, 4096}) {
    const float bound = quant::normalized_rows_amax_bound(K);
    float worst = 0;
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> x(size_t(K), 0.0f);
      if (trial == 0) {
        x[size_t(K / 3)] = -3.7e4f;  // one massive value: the attention sink's kind of row
      } else {
        for (int k = 0; k < K; ++k)
          x[size_t(k)] =
              round_bf16(std::ldexp(float((k * 7919 + trial * 104729) % 2001 - 1000), -(k + trial) % 20));
      }
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const float r = 1.0f / std::sqrt(float(ss) / float(K) + 1e-5f);
      for (float v : x) worst = std::max(worst, std::fabs(round_bf16(v * r)));
    }
    EXPECT_LE(worst, bound) << "K " << K;
    EXPECT_GE(worst, 0.99f * std::sqrt(float(K))) << "K " << K << ": the one-value row reaches sqrt(K)";
  }
}

TEST(DelayedScaling, InitialScaleIsValid) {
  DelayedScale st;
  EXPECT_TRUE(std::isfinite(st.scale()));
  EXPECT_GT(st.scale(), 0.0f);
  EXPECT_FLOAT_EQ(st.scale(), 32768.0f / 448.0f * (1 + 0x1p-20f));
  DelayedScalingConfig c;
  c.initial_amax = 448.0f;
  EXPECT_FLOAT_EQ(DelayedScale(c).scale(), 1.0f * (1 + 0x1p-20f));
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    c.initial_amax = bad;
    EXPECT_FUTR_ERROR(DelayedScale{c}, "initial amax");
  }
  c = {};
  c.history = 0;
  EXPECT_FUTR_ERROR(c.validate(), "history 0");
  c = {};
  c.margin = 0.5f;
  EXPECT_FUTR_ERROR(c.validate(), "margin 0.5");
}

TEST(DelayedScaling, ScaleFollowsPreviousAmaxAndFitsIt) {
  DelayedScale st;
  const std::vector<float> x = ramp(1000, 3.0f);
  call(st, x);  // first call: initial scale
  EXPECT_FLOAT_EQ(st.scale(), next_scale(3.0f, 1.0f));
  // The same data again: the largest value maps to 448 and nothing saturates
  // (the 1 + 2^-20 factor absorbs FP32 rounding of y * (1/s)).
  const Fp8QuantStats s = call(st, x);
  EXPECT_EQ(s.saturated, 0u);
  std::vector<float> q(x.size());
  quantize_e4m3_scaled(x, st.scale(), q);
  EXPECT_EQ(*std::max_element(q.begin(), q.end()), 448.0f);
  // Many random amaxes: the scale never makes the window's max saturate.
  auto& rng = test::test_rng();
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  for (int i = 0; i < 2000; ++i) {
    const float a = std::exp2(u(rng));
    const float s2 = next_scale(a, 1.0f);
    EXPECT_LE(std::fabs(a * (1.0f / s2)), 448.0f) << a;
    EXPECT_LE(std::fabs(a / s2), 448.0f) << a;
  }
}

// Static scaling: every call uses the initial scale, whatever the calls
// before it recorded; saturation, zero and non-finite calls are still counted.
TEST(DelayedScaling, StaticScaleNeverMovesButCounts) {
  DelayedScalingConfig cfg;
  cfg.scaling = Fp8Scaling::kStatic;
  cfg.initial_amax = 10.0f;
  DelayedScale st(cfg);
  const float s0 = st.scale();
  EXPECT_FLOAT_EQ(s0, next_scale(10.0f, 1.0f));
  call(st, ramp(100, 3.0f));  // smaller: a delayed scale would shrink
  EXPECT_EQ(st.scale(), s0);
  const Fp8QuantStats big = call(st, ramp(100, 40.0f));  // larger: saturates, and stays saturating
  EXPECT_GT(big.saturated, 0u);
  EXPECT_EQ(st.scale(), s0);
  EXPECT_GT(call(st, ramp(100, 40.0f)).saturated, 0u);
  EXPECT_EQ(st.record(0.0f, 0), DelayedScale::Action::kAccept);
  EXPECT_EQ(st.scale(), s0);
  EXPECT_EQ(st.stats().calls, 4u);
  EXPECT_EQ(st.stats().saturated_calls, 2u);
  EXPECT_EQ(st.stats().zero_calls, 1u);
  EXPECT_FLOAT_EQ(st.stats().max_amax, 40.0f);
  // The recompute policy never asks for a re-run under static scales (the scale would not change).
  cfg.policy = Fp8SaturationPolicy::kRecompute;
  DelayedScale re(cfg);
  EXPECT_EQ(re.record(1000.0f, 5), DelayedScale::Action::kAccept);
  EXPECT_EQ(re.scale(), s0);
  EXPECT_EQ(to_string(Fp8Scaling::kStatic), "static");
  EXPECT_EQ(parse_fp8_scaling("delayed"), Fp8Scaling::kDelayed);
  EXPECT_THROW(parse_fp8_scaling("dynamic"), Error);
}

TEST(DelayedScaling, AllZeroTensorKeepsADefinedScale) {
  DelayedScale st;
  const float s0 = st.scale();
  const std::vector<float> zeros(256, 0.0f);
  std::vector<float> out;
  const Fp8QuantStats s = call(st, zeros, &out);
  EXPECT_EQ(s.amax, 0.0f);
  EXPECT_EQ(st.scale(), s0);  // never 0 or NaN
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(st.stats().zero_calls, 1u);
  // After real data, zeros do not pull the scale down (window max).
  call(st, ramp(64, 10.0f));
  const float s1 = st.scale();
  call(st, zeros);
  EXPECT_EQ(st.scale(), s1);
}

TEST(DelayedScaling, NonFiniteAmaxIsNotRecorded) {
  DelayedScale st;
  call(st, ramp(64, 2.0f));
  const float s = st.scale();
  EXPECT_EQ(st.record(NAN, 0), DelayedScale::Action::kAccept);
  EXPECT_EQ(st.record(INFINITY, 3), DelayedScale::Action::kAccept);
  EXPECT_EQ(st.scale(), s);
  EXPECT_EQ(st.stats().nonfinite_calls, 2u);
  std::vector<float> x = ramp(8, 1.0f);
  x[2] = NAN;
  EXPECT_FALSE(quantize_e4m3_scaled(x, 1.0f, {}).finite);
}

TEST(DelayedScaling, SuddenJumpSaturatesOnceThenRescales) {
  DelayedScalingConfig c;
  c.history = 4;
  DelayedScale st(c);
  for (int i = 0; i < 6; ++i) call(st, ramp(512, 1.0f));
  ASSERT_EQ(st.stats().saturated_calls, 0u);
  const float s_old = st.scale();
  EXPECT_FLOAT_EQ(s_old, next_scale(1.0f, 1.0f));
  // Jump: 100x the range. The call runs with the old scale: clamped and counted.
  const std::vector<float> big = ramp(512, 100.0f);
  std::vector<float> q(big.size());
  const Fp8QuantStats j = quantize_e4m3_scaled(big, s_old, q);
  uint64_t expect = 0;
  for (float v : big) expect += std::fabs(v * (1.0f / s_old)) > 448.0f ? 1 : 0;
  EXPECT_EQ(j.saturated, expect);
  EXPECT_GT(j.saturated, 400u);
  for (float v : q) EXPECT_LE(std::fabs(v), 448.0f);
  EXPECT_EQ(st.record(j.amax, j.saturated), DelayedScale::Action::kAccept);  // clamp policy
  EXPECT_EQ(st.stats().saturated_calls, 1u);
  EXPECT_EQ(st.stats().saturated_values, expect);
  // Re-scale next call: the new range fits.
  EXPECT_FLOAT_EQ(st.scale(), next_scale(100.0f, 1.0f));
  EXPECT_EQ(call(st, big).saturated, 0u);
  // Back to the small range: the large amax ages out after `history` calls.
  for (int i = 0; i < 3; ++i) call(st, ramp(512, 1.0f));
  EXPECT_FLOAT_EQ(st.scale(), next_scale(100.0f, 1.0f));
  call(st, ramp(512, 1.0f));
  EXPECT_FLOAT_EQ(st.scale(), next_scale(1.0f, 1.0f));
  EXPECT_EQ(st.stats().saturated_calls, 1u);
}

TEST(DelayedScaling, ClampPolicyOutputValues) {
  DelayedScalingConfig c;
  c.initial_amax = 448.0f;  // s ~ 1
  DelayedScale st(c);
  std::vector<float> out;
  const std::vector<float> x = {1000.0f, -600.0f, 3.0f, 0.0f};
  const Fp8QuantStats s = call(st, x, &out);
  EXPECT_EQ(s.saturated, 2u);
  EXPECT_EQ(s.amax, 1000.0f);
  // out = q * s_new (scale after the record); q itself is clamped to +-448.
  std::vector<float> q(x.size());
  quantize_e4m3_scaled(x, 1.0f * (1 + 0x1p-20f), q);
  EXPECT_EQ(q[0], 448.0f);
  EXPECT_EQ(q[1], -448.0f);
  EXPECT_EQ(q[2], 3.0f);
  EXPECT_EQ(st.stats().saturated_values, 2u);
  EXPECT_EQ(st.stats().recomputes, 0u);
}

TEST(DelayedScaling, RecomputePolicyReRunsWithoutSaturation) {
  DelayedScalingConfig c;
  c.initial_amax = 1.0f;
  c.policy = Fp8SaturationPolicy::kRecompute;
  DelayedScale st(c);
  bool re = false;
  std::vector<float> out;
  const std::vector<float> x = ramp(300, 50.0f);
  call(st, x, &out, &re);
  EXPECT_TRUE(re);
  EXPECT_EQ(st.stats().recomputes, 1u);
  EXPECT_EQ(st.stats().saturated_calls, 1u);
  // The re-run's values are the correctly scaled E4M3 values (no clamping).
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_LE(std::fabs(out[i] - x[i]), std::fabs(x[i]) / 16 + st.scale());
  EXPECT_FUTR_ERROR(st.record_rerun(50.0f, 3), "still saturated 3 values");
}

TEST(DelayedScaling, SeparateStatePerRequestGroup) {
  ScaleBank bank;
  const int a = bank.add_site("blk.0.attn_in");
  const int d = bank.add_site("blk.0.down_in");
  bank.set_initial_amax(d, 100.0f);
  // Group 1 sees large values, group 2 small ones, interleaved.
  for (int i = 0; i < 5; ++i) {
    bank.set_active_group(1);
    call(bank.active(a), ramp(64, 1000.0f));
    bank.set_active_group(2);
    call(bank.active(a), ramp(64, 0.5f));
  }
  EXPECT_FLOAT_EQ(bank.at(1, a).scale(), next_scale(1000.0f, 1.0f));
  EXPECT_FLOAT_EQ(bank.at(2, a).scale(), next_scale(0.5f, 1.0f));
  EXPECT_EQ(bank.at(1, a).stats().calls, 5u);
  EXPECT_EQ(bank.at(2, a).stats().calls, 5u);
  // Per-site initial amax applies to every group; untouched sites keep it.
  EXPECT_FLOAT_EQ(bank.at(7, d).scale(), next_scale(100.0f, 1.0f));
  EXPECT_EQ(bank.groups(), (std::vector<int>{1, 2, 7}));
  EXPECT_EQ(bank.total().calls, 10u);
  EXPECT_EQ(bank.find(3, a), nullptr);
  EXPECT_FUTR_ERROR(bank.add_site("late"), "added after a group was created");
  EXPECT_FUTR_ERROR(bank.set_initial_amax(a, 0.0f), "initial amax 0");
}

TEST(DelayedScaling, FastE4m3MatchesReference) {
  // Every E4M3 value, the midpoints between neighbours (ties to even), and random floats.
  std::vector<float> probes;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = e4m3_to_float(uint8_t(b));
    probes.push_back(v);
    probes.push_back(std::nextafter(v, 1e9f));
    probes.push_back(std::nextafter(v, -1e9f));
    if (b + 1 < 256 && ((b + 1) & 0x7f) != 0x7f && (b & 0x7f) != 0x7e) {
      const float w = e4m3_to_float(uint8_t(b + 1));
      probes.push_back(0.5f * (v + w));
    }
  }
  auto& rng = test::test_rng();
  std::uniform_real_distribution<float> e(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) probes.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(e(rng)));
  for (float v : {448.0f, 464.0f, 479.9f, 480.0f, 1e6f, 0x1p-6f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f})
    probes.push_back(v);
  for (float v : probes)
    ASSERT_EQ(std::bit_cast<uint32_t>(round_e4m3_fast(v)), std::bit_cast<uint32_t>(round_e4m3(v))) << v;
}
