// FP8 activation scaling: the host-side state machine that picks the
// per-tensor E4M3 scale of each FP8 GEMM input, static (one calibrated scale
// per site, the default of the commands: no call changes what another
// computes) or delayed (from the amax recorded by previous calls, the paper's
// rule, with its policy when a call saturates).
//
// Device contract (src/kernels/epilogue/swiglu_fp8.cuh, src/launch/fp8_gemm.h
// SwiGluFp8Args; the same for every FP8 activation, docs/QUANTIZATION.md):
//   - a call reads ONE dequantization scale s (scale_in), chosen before it runs;
//   - it writes  q = e4m3_satfinite(y * (1/s))  (RNE, clamp to +-448, FP32
//     reciprocal as the epilogue computes it) and y ~= q * s downstream;
//   - it records amax = max |y| (of the unscaled FP32 values) and the count of
//     values with |y * (1/s)| > 448 (saturated, i.e. clamped);
//   - the kernel never reads its own amax: the scale of a call depends only on
//     earlier calls, so results are deterministic given the state.
//
// State machine (one DelayedScale per FP8 tensor site and request group):
//   history   the amax of the last `history` calls (a ring; finite values only)
//   scale     s = clamp( m * margin / 448 * (1 + 2^-20), 2^-120, 2^120 )
//             with m = max(history); the factor 1 + 2^-20 keeps m itself at or
//             below 448 after FP32 rounding of y / s or y * (1/s), so a call on
//             the same data as the history never counts a false saturation.
//   initial   before any call: m = initial_amax (valid, > 0, finite), so the
//             first call has a defined scale. Default 2^15: deliberately
//             large, because clamping is far worse than coarse rounding (a
//             first call clamped at 448 destroyed the attention-sink token's
//             massive activations, amax ~2e4 in SmolLM2's residual stream:
//             perplexity +48%; docs/QUANTIZATION.md). The CLI always sets a
//             calibrated initial amax per site (the maximum over held-out
//             calibration tokens, stored in .futr files).
//   all-zero  a call with amax = 0 is recorded as 0; while every amax in the
//             window is 0 the scale stays what it was (a zero tensor is exact
//             under any scale, and the next non-zero call is not hurt by a
//             meaningless scale), never 0 or NaN.
//   non-finite  amax NaN/Inf is not recorded (counted in nonfinite_calls); the
//             scale is unchanged.
//   saturation  counted per call (saturated_calls) and per value
//             (saturated_values). Policy:
//             (Fp8SaturationPolicy, core/number_formats.h: "clamp" | "recompute")
//               kClampRescale (default, CUDA-graph friendly): the call's
//                 values stay clamped to +-448 s; its amax enters the history,
//                 so the NEXT call's scale covers it (re-scale next call);
//               kRecompute: additionally, record() answers kRecompute and the
//                 caller re-runs the call with the new scale (which covers
//                 this call's amax, so the re-run does not saturate); needs
//                 the counter on the host (a sync), so it is for the
//                 reference and for eager execution, not for graphs.
//   sudden jump  a call whose range jumps above the window saturates once
//             (counted); the next call (or the re-run) uses the new range;
//             the old smaller range ages out after `history` calls.
//
// Separate state per concurrent request group: ScaleBank keeps one
// DelayedScale per (group, site); groups never share amax history.
//
// next_scale() is the pure update rule, written so a one-thread device kernel
// can run the same arithmetic inside a CUDA graph.
//
// Tests: tests/quant/delayed_scaling_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/number_formats.h"

namespace futr::quant {

struct DelayedScalingConfig {
  // kStatic: every call uses the initial scale (next_scale(initial_amax,
  // margin)) and records only its counters (saturation included): the state
  // never changes what a later call computes. kDelayed: the state machine above.
  Fp8Scaling scaling = Fp8Scaling::kDelayed;
  float initial_amax = 32768.0f;  // amax assumed before the first call (> 0, finite)
  int history = 16;               // calls in the amax window (1..1024)
  float margin = 1.0f;            // headroom: the window's max maps to 448 / margin (>= 1)
  Fp8SaturationPolicy policy = Fp8SaturationPolicy::kClampRescale;  // the enum's home: core/number_formats.h

  void validate() const;  // futr::Error naming the bad field
};

inline constexpr float kFp8MinScale = 0x1p-120f;
inline constexpr float kFp8MaxScale = 0x1p120f;

// The calibrated initial amax a .futr file may carry per site (checked by the
// reader naming the site and value, kept to by futr quantize): [2^-24, 2^24].
// NOTE: the largest activations reported for Llama-family models (the
// attention sink's massive activations) are ~1e4 (SmolLM2's residual stream:
// ~2e4), about 1/800 of the upper bound; below 2^-24 a site carries no signal
// that FP8 could keep. Inside the bounds, next_scale() never reaches its clamp.
inline constexpr float kFp8MinCalibratedAmax = 0x1p-24f;
inline constexpr float kFp8MaxCalibratedAmax = 0x1p24f;

// The scale for window maximum m (> 0) and margin: m * margin / 448 * (1 + 2^-20), clamped.
float next_scale(float window_max, float margin);

// The initial amax of a site that casts RMS-normalized rows (the folded
// RMSNorm with 1/rms in the cast: bf16(x / rms(x)) over K values): every such
// value satisfies |x_k| / rms(x) <= sqrt(K) (sum of squares / K = rms^2, and
// eps only lowers it), so sqrt(K) (times 1 + 2^-8 for the BF16 rounding up)
// bounds the first call for any data. The calibrated amax of a .futr file
// measures the un-normalized rows (the epilogue placement) and would clamp
// whole rows of the first call here (SmolLM2: 3% of the values of a
// 200-row prompt, H200 2026-12-02).
float normalized_rows_amax_bound(int K);

struct ScaleStats {
  uint64_t calls = 0;             // calls recorded (re-runs not counted twice)
  uint64_t saturated_calls = 0;   // calls with at least one saturated value
  uint64_t saturated_values = 0;  // values clamped to +-448, summed over calls
  uint64_t zero_calls = 0;        // calls with amax == 0
  uint64_t nonfinite_calls = 0;   // calls with a NaN/Inf amax (not recorded)
  uint64_t recomputes = 0;        // re-runs asked for (kRecompute)
  float max_amax = 0.0f;          // largest finite amax seen

  ScaleStats& operator+=(const ScaleStats& o);
};

class DelayedScale {
 public:
  enum class Action { kAccept, kRecompute };

  explicit DelayedScale(const DelayedScalingConfig& config = {});
  // Dequantization scale s of the next call: finite, in [2^-120, 2^120].
  float scale() const { return scale_; }
  // After a call that used scale(): its amax (max |y|) and saturated count.
  // Updates the history and the scale; kRecompute when the policy wants the
  // call re-run with the new scale().
  Action record(float amax, uint64_t saturated);
  // After such a re-run: counts nothing new, checks it no longer saturates
  // (futr::Error otherwise: the rule guarantees it).
  void record_rerun(float amax, uint64_t saturated);
  const ScaleStats& stats() const { return stats_; }
  const DelayedScalingConfig& config() const { return config_; }
  // Back to the initial state (history and counters cleared).
  void reset();

 private:
  DelayedScalingConfig config_;
  std::vector<float> ring_;  // [history] amax of recent calls (0 where unused)
  size_t next_ = 0;          // ring position of the next record
  float scale_ = 1.0f;       // current dequantization scale
  ScaleStats stats_;
};

// E4M3 quantization of one tensor with scale s, as the device does it:
// out[i] = e4m3_satfinite(x[i] * (1/s)) decoded back to float (NOT multiplied
// by s), or left alone when out is empty. Returns amax = max |x| (finite values)
// and the count of |x * (1/s)| > 448.
struct Fp8QuantStats {
  float amax = 0.0f;
  uint64_t saturated = 0;
  bool finite = true;  // false if x held NaN/Inf
};
Fp8QuantStats quantize_e4m3_scaled(std::span<const float> x, float s, std::span<float> out);

// Fast E4M3 round trip (RNE, satfinite) of a finite float; equal to
// e4m3_to_float(float_to_e4m3(v)) (tests/quant/delayed_scaling_test.cpp checks).
float round_e4m3_fast(float v);

// One DelayedScale per (request group, site). Sites are registered by name
// once (e.g. "blk.3.attn_in"); groups are created on first use.
class ScaleBank {
 public:
  explicit ScaleBank(const DelayedScalingConfig& config = {});
  int add_site(const std::string& name);  // returns the site id
  int sites() const { return int(names_.size()); }
  const std::string& site_name(int site) const;
  // The state of `site` for request group `group` (created with the config).
  DelayedScale& at(int group, int site);
  // The group the CPU reference is running (set by the caller; default 0).
  void set_active_group(int group) { active_ = group; }
  int active_group() const { return active_; }
  DelayedScale& active(int site) { return at(active_, site); }
  // The state of (group, site) if that group exists, else nullptr.
  const DelayedScale* find(int group, int site) const;
  // Initial amax of a site for every group created afterwards (e.g. calibrated
  // values stored in a .futr file).
  void set_initial_amax(int site, float amax);
  ScaleStats total() const;  // summed over groups and sites
  std::vector<int> groups() const;
  const DelayedScalingConfig& config() const { return config_; }

 private:
  DelayedScalingConfig config_;
  std::vector<std::string> names_;
  std::vector<float> initial_;  // [sites] initial amax per site
  std::map<int, std::vector<DelayedScale>> groups_;
  int active_ = 0;
};

}  // namespace futr::quant
