// Delayed FP8 scaling state machine (see delayed_scaling.h).
#include "quant/delayed_scaling.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::quant {

void DelayedScalingConfig::validate() const {
  FUTR_CHECK(std::isfinite(initial_amax) && initial_amax > 0.0f,
             "delayed scaling: initial amax {} must be finite and positive", initial_amax);
  FUTR_CHECK(history >= 1 && history <= 1024, "delayed scaling: history {} out of range (1..1024)", history);
  FUTR_CHECK(std::isfinite(margin) && margin >= 1.0f && margin <= 1e6f,
             "delayed scaling: margin {} out of range (1..1e6)", margin);
}

float normalized_rows_amax_bound(int K) { return std::sqrt(float(K)) * (1.0f + 0x1p-8f); }

float next_scale(float window_max, float margin) {
  const float s = window_max * margin / kE4M3Max * (1.0f + 0x1p-20f);
  return std::clamp(s, kFp8MinScale, kFp8MaxScale);
}

ScaleStats& ScaleStats::operator+=(const ScaleStats& o) {
  calls += o.calls;
  saturated_calls += o.saturated_calls;
  saturated_values += o.saturated_values;
  zero_calls += o.zero_calls;
  nonfinite_calls += o.nonfinite_calls;
  recomputes += o.recomputes;
  max_amax = std::max(max_amax, o.max_amax);
  return *this;
}

DelayedScale::DelayedScale(const DelayedScalingConfig& config) : config_(config) {
  config_.validate();
  reset();
}

void DelayedScale::reset() {
  ring_.assign(size_t(config_.history), 0.0f);
  next_ = 0;
  stats_ = {};
  scale_ = next_scale(config_.initial_amax, config_.margin);
}

DelayedScale::Action DelayedScale::record(float amax, uint64_t saturated) {
  ++stats_.calls;
  if (saturated > 0) {
    ++stats_.saturated_calls;
    stats_.saturated_values += saturated;
  }
  if (!std::isfinite(amax) || amax < 0.0f) {
    ++stats_.nonfinite_calls;  // not recorded; scale unchanged
    return Action::kAccept;
  }
  if (amax == 0.0f) ++stats_.zero_calls;
  stats_.max_amax = std::max(stats_.max_amax, amax);
  if (config_.scaling == Fp8Scaling::kStatic) return Action::kAccept;  // counted; the scale never moves
  ring_[next_] = amax;
  next_ = (next_ + 1) % ring_.size();
  const float m = *std::max_element(ring_.begin(), ring_.end());
  if (m > 0.0f) scale_ = next_scale(m, config_.margin);  // all-zero window: keep the scale
  if (saturated > 0 && config_.policy == Fp8SaturationPolicy::kRecompute) {
    ++stats_.recomputes;
    return Action::kRecompute;
  }
  return Action::kAccept;
}

void DelayedScale::record_rerun(float amax, uint64_t saturated) {
  FUTR_CHECK(saturated == 0, "delayed scaling: a re-run with scale {} still saturated {} values (amax {})",
             scale_, saturated, amax);
}

float round_e4m3_fast(float v) {
  const float a = std::fabs(v);
  float r;
  if (a >= 0x1p-6f) {
    // Normal range: keep 3 mantissa bits, round to nearest even on the 20 dropped bits.
    uint32_t u = std::bit_cast<uint32_t>(a);
    u += 0x7ffffu + ((u >> 20) & 1u);
    u &= ~0xfffffu;
    r = std::min(std::bit_cast<float>(u), kE4M3Max);  // satfinite
  } else {
    r = round_half_even(a * 512.0f) * 0x1p-9f;  // subnormals: steps of 2^-9
  }
  return std::copysign(r, v);
}

Fp8QuantStats quantize_e4m3_scaled(std::span<const float> x, float s, std::span<float> out) {
  FUTR_ASSERT(out.empty() || out.size() == x.size());
  FUTR_CHECK(std::isfinite(s) && s > 0.0f, "FP8 quantization: scale {} must be finite and positive", s);
  const float inv = 1.0f / s;  // the epilogue's qscale = 1 / scale_in
  Fp8QuantStats st;
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      st.finite = false;
      if (!out.empty()) out[i] = e4m3_to_float(float_to_e4m3(v * inv));
      continue;
    }
    st.amax = std::max(st.amax, std::fabs(v));
    const float q = v * inv;
    st.saturated += std::fabs(q) > kE4M3Max ? 1u : 0u;
    if (!out.empty()) out[i] = round_e4m3_fast(q);
  }
  return st;
}

ScaleBank::ScaleBank(const DelayedScalingConfig& config) : config_(config) { config_.validate(); }

int ScaleBank::add_site(const std::string& name) {
  FUTR_CHECK(groups_.empty(), "ScaleBank: site '{}' added after a group was created", name);
  names_.push_back(name);
  initial_.push_back(config_.initial_amax);
  return int(names_.size()) - 1;
}

const std::string& ScaleBank::site_name(int site) const {
  FUTR_ASSERT(site >= 0 && site < sites());
  return names_[size_t(site)];
}

DelayedScale& ScaleBank::at(int group, int site) {
  FUTR_CHECK(site >= 0 && site < sites(), "ScaleBank: no site {} ({} registered)", site, sites());
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    std::vector<DelayedScale> states;
    states.reserve(names_.size());
    for (size_t i = 0; i < names_.size(); ++i) {
      DelayedScalingConfig c = config_;
      c.initial_amax = initial_[i];
      states.emplace_back(c);
    }
    it = groups_.emplace(group, std::move(states)).first;
  }
  return it->second[size_t(site)];
}

const DelayedScale* ScaleBank::find(int group, int site) const {
  auto it = groups_.find(group);
  if (it == groups_.end() || site < 0 || site >= sites()) return nullptr;
  return &it->second[size_t(site)];
}

void ScaleBank::set_initial_amax(int site, float amax) {
  FUTR_CHECK(site >= 0 && site < sites(), "ScaleBank: no site {}", site);
  FUTR_CHECK(std::isfinite(amax) && amax > 0.0f, "ScaleBank: initial amax {} of site '{}' invalid", amax,
             names_[size_t(site)]);
  initial_[size_t(site)] = amax;
}

ScaleStats ScaleBank::total() const {
  ScaleStats t;
  for (const auto& [g, states] : groups_)
    for (const auto& s : states) t += s.stats();
  return t;
}

std::vector<int> ScaleBank::groups() const {
  std::vector<int> g;
  for (const auto& [id, states] : groups_) g.push_back(id);
  return g;
}

}  // namespace futr::quant
