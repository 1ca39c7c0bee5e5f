// BF16, INT4 and FP8 Linear layers of the quantized reference (see quant_linear.h).
#include "cpu_engine/quant_linear.h"

#include <algorithm>

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/numeric.h"
#include "quant/int4_quant.h"

namespace futr::cpu {

void round_bf16_into(const float* x, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = round_bf16(x[i]);
}

// ---- BF16 -------------------------------------------------------------------------------

Bf16Linear::Bf16Linear(const float* w, int64_t n, int64_t k, bool round_output, std::string name)
    : w_(size_t(n * k)), n_(n), k_(k), round_output_(round_output), name_(std::move(name)) {
  FUTR_CHECK(n > 0 && k > 0, "{}: empty BF16 weight [{}, {}]", name_, n, k);
  round_bf16_into(w, n * k, w_.data());
}

std::string Bf16Linear::describe() const {
  return fmt::format("bf16 [{}, {}]{}", n_, k_, round_output_ ? "" : " fp32-out");
}

void Bf16Linear::forward(const float* x, int64_t m, float* y) {
  FUTR_ASSERT(m >= 1);
  xb_.resize(size_t(m * k_));
  round_bf16_into(x, m * k_, xb_.data());
  gemm_xwt(xb_.data(), m, w_.data(), n_, k_, y);
  if (round_output_) round_bf16_into(y, m * n_, y);
}

// ---- INT4 -------------------------------------------------------------------------------

Int4Linear::Int4Linear(quant::Int4Weights w, std::string name)
    : w_(std::move(w)), deq_(quant::dequantize_int4(w_)), name_(std::move(name)) {}

std::string Int4Linear::describe() const { return fmt::format("int4 g{} [{}, {}]", w_.group, w_.n, w_.k); }

void Int4Linear::forward(const float* x, int64_t m, float* y) {
  FUTR_ASSERT(m >= 1);
  const int64_t K = w_.k, N = w_.n;
  xb_.resize(size_t(m * K));
  round_bf16_into(x, m * K, xb_.data());
  gemm_xwt(xb_.data(), m, deq_.data(), N, K, y);
  round_bf16_into(y, m * N, y);
}

void Int4Linear::forward_grouped(const float* x, int64_t m, float* y) const {
  const int K = w_.k, N = w_.n, G = w_.group, groups = K / G;
  for (int64_t i = 0; i < m; ++i)
    for (int n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        float part = 0.0f;
        for (int t = 0; t < G; ++t) {
          const size_t kk = size_t(g) * size_t(G) + size_t(t);
          part += round_bf16(x[size_t(i) * size_t(K) + kk]) * float(w_.q[size_t(n) * size_t(K) + kk]);
        }
        acc += part * fp16_to_float(w_.scale[size_t(n) * size_t(groups) + size_t(g)]);
      }
      y[size_t(i) * size_t(N) + size_t(n)] = acc;
    }
}

// ---- FP8 --------------------------------------------------------------------------------

Fp8Linear::Fp8Linear(quant::Fp8Weights w, std::shared_ptr<Fp8Site> site, bool owner, float eps,
                     std::string name, bool rms_in_cast, bool round_input)
    : w_(std::move(w)),
      site_(std::move(site)),
      owner_(owner),
      eps_(eps),
      rms_in_cast_(rms_in_cast),
      round_input_(round_input),
      name_(std::move(name)) {
  FUTR_CHECK(site_ && site_->bank, "{}: FP8 layer without an activation site", name_);
  FUTR_CHECK(w_.w.size() == size_t(w_.n) * size_t(w_.k) && w_.scale.size() == size_t(w_.n),
             "{}: FP8 weight with {} bytes and {} scales for [{}, {}]", name_, w_.w.size(), w_.scale.size(),
             w_.n, w_.k);
  w8_.resize(w_.w.size());
  for (size_t i = 0; i < w8_.size(); ++i) w8_[i] = e4m3_to_float(w_.w[i]);
}

std::string Fp8Linear::describe() const {
  return fmt::format(
      "fp8 e4m3 per-channel [{}, {}]{} (site {}{})", w_.n, w_.k,
      w_.folded_gain ? (rms_in_cast_ ? " rmsnorm-folded, 1/rms in the cast" : " rmsnorm-folded") : "",
      site_->bank->site_name(site_->id), owner_ ? "" : ", shared");
}

void Fp8Linear::quantize_input(const float* x, int64_t m) {
  Fp8Site& s = *site_;
  const int64_t K = w_.k;
  xb_.resize(size_t(m * K));
  if (round_input_) round_bf16_into(x, m * K, xb_.data());  // the BF16 activation the GPU holds
  else std::copy(x, x + m * K, xb_.begin());
  if (w_.folded_gain) {
    // RowSumSq of the stored BF16 rows -> RowRmsFactor r = 1/sqrt(sumsq/K + eps).
    s.row_factor.resize(size_t(m));
    for (int64_t i = 0; i < m; ++i) {
      double ss = 0.0;
      for (int64_t k = 0; k < K; ++k) ss += double(xb_[size_t(i * K + k)]) * xb_[size_t(i * K + k)];
      s.row_factor[size_t(i)] = 1.0f / std::sqrt(float(ss) / float(K) + eps_);
    }
    if (rms_in_cast_) {  // normalize, round to BF16 again, then cast; no factor after the GEMM
      for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < K; ++k)
          xb_[size_t(i * K + k)] = round_bf16(xb_[size_t(i * K + k)] * s.row_factor[size_t(i)]);
      s.row_factor.clear();
    }
  } else {
    s.row_factor.clear();
  }
  s.a.resize(size_t(m * K));
  quant::DelayedScale& state = s.bank->active(s.id);
  s.scale = state.scale();
  quant::Fp8QuantStats st = quant::quantize_e4m3_scaled(xb_, s.scale, s.a);
  FUTR_CHECK(st.finite, "{}: the FP8 activation of site '{}' holds NaN/Inf", name_, s.bank->site_name(s.id));
  if (state.record(st.amax, st.saturated) == quant::DelayedScale::Action::kRecompute) {
    s.scale = state.scale();
    st = quant::quantize_e4m3_scaled(xb_, s.scale, s.a);
    state.record_rerun(st.amax, st.saturated);
  }
  s.x = x;
  s.m = m;
  ++s.generation;
}

void Fp8Linear::forward(const float* x, int64_t m, float* y) {
  FUTR_ASSERT(m >= 1);
  Fp8Site& s = *site_;
  if (owner_) {
    quantize_input(x, m);
  } else {
    FUTR_CHECK(s.generation != seen_ && s.x == x && s.m == m,
               "{}: FP8 layer sharing site '{}' called without its owner on the same input", name_,
               s.bank->site_name(s.id));
    seen_ = s.generation;
  }
  const int64_t N = w_.n, K = w_.k;
  gemm_xwt(s.a.data(), m, w8_.data(), N, K, y);
  // ColScale: acc * (a_s * b_s[n]); RowRmsFactor: * r[m] (folded layers).
  const bool folded = !s.row_factor.empty();
#pragma omp parallel for schedule(static) if (m * N >= (1 << 16))
  for (int64_t i = 0; i < m; ++i) {
    float* row = y + i * N;
    for (int64_t n = 0; n < N; ++n) row[n] *= s.scale * w_.scale[size_t(n)];
    if (folded)
      for (int64_t n = 0; n < N; ++n) row[n] *= s.row_factor[size_t(i)];
  }
}

}  // namespace futr::cpu
