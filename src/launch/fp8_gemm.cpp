// Host launcher of the FP8 prefill GEMM: validation against the explicit
// variant list (launch/fp8_gemm_variants.h), the tile heuristic, argument
// validation and tensor maps (see fp8_gemm.h).
#include "launch/fp8_gemm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "launch/check.h"
#include "launch/device.h"
#include "launch/fp8_gemm_launch.h"
#include "launch/fp8_gemm_variants.h"
#include "launch/tensor_map.h"

namespace futr::cuda {

namespace {
using E = GemmEpilogue;
using I = GemmInput;

std::string list_variants(E e, I in) {
  std::string s;
  for (const auto& v : kGemmVariants)
    if (v.epilogue == e && v.input == in) s += (s.empty() ? "" : ", ") + to_string(v);
  return s.empty() ? "none" : s;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Everything that can be checked without a GPU, so invalid calls fail the same
// way on CI as on the device.
void check_operands(const GemmOperands& op, E e) {
  const char* name = "FP8 GEMM";
  FUTR_CHECK(op.a && op.b, "{} ({}): A and B must be non-null", name, to_string(e));
  FUTR_CHECK(op.M >= 1 && op.N >= 8 && op.K >= 16, "{} ({}): M={} N={} K={}: need M >= 1, N >= 8, K >= 16",
             name, to_string(e), op.M, op.N, op.K);
  FUTR_CHECK(op.N % 8 == 0, "{} ({}): N={} must be a multiple of 8", name, to_string(e), op.N);
  const int kalign = op.input == I::kE4M3 ? 16 : 8;
  FUTR_CHECK(op.K % kalign == 0,
             "{} ({}): K={} must be a multiple of {} for {} inputs (TMA rows are multiples of 16 bytes)",
             name, to_string(e), op.K, kalign, to_string(op.input));
  FUTR_CHECK(reinterpret_cast<uintptr_t>(op.a) % 16 == 0 && reinterpret_cast<uintptr_t>(op.b) % 16 == 0,
             "{} ({}): A and B must be 16-byte aligned", name, to_string(e));
}

void check_bf16_out(const void* out, int& ld, int N, const char* what) {
  FUTR_CHECK(out != nullptr, "FP8 GEMM: {} must be non-null", what);
  if (ld == 0) ld = N;
  FUTR_CHECK(ld >= N && ld % 4 == 0, "FP8 GEMM: {} row stride {} must be >= N={} and a multiple of 4", what,
             ld, N);
  FUTR_CHECK(reinterpret_cast<uintptr_t>(out) % 8 == 0, "FP8 GEMM: {} must be 8-byte aligned", what);
}

// The compiled variant of `cfg`; futr::Error naming the nearest compiled one
// and all of this (epilogue, input) otherwise.
// Promotion applies to E4M3 inputs (BF16 WGMMAs accumulate in FP32).
bool wants_promoted(I in, const GemmConfig& cfg) { return in == I::kE4M3 && !cfg.fast_accum; }

const GemmVariant& find_variant(E e, const GemmOperands& op, const GemmConfig& cfg) {
  const GemmVariant want{
      e, op.input, cfg.bm, cfg.bn, cfg.stages, cfg.pingpong, wants_promoted(op.input, cfg)};
  for (const auto& v : kGemmVariants)
    if (v == want) return v;
  const GemmVariant* near = nearest_gemm_variant(e, op.input, cfg);
  fail(
      "FP8 GEMM: no compiled variant {} {} tile {}x{} stages {}{}{}; nearest supported: {}; compiled for "
      "this "
      "epilogue and input: {}",
      to_string(e), to_string(op.input), cfg.bm, cfg.bn, cfg.stages, cfg.pingpong ? " ping-pong" : "",
      want.promoted ? " promoted" : (op.input == I::kE4M3 ? " fast-accum" : ""),
      near ? to_string(*near) : std::string("none"), list_variants(e, op.input));
}

const GemmVariant& resolve(E e, const GemmOperands& op, const GemmConfig* config, GemmConfig& cfg,
                           int sm_count) {
  cfg = config ? *config : choose_gemm_config(e, op.input, op.M, op.N, op.K, sm_count);
  return find_variant(e, op, cfg);
}

// Validates the config against the compiled list, then builds the launch.
detail::GemmLaunch prepare(E e, const GemmOperands& op, const GemmConfig* config, cudaStream_t s,
                           const GemmVariant*& variant) {
  GemmConfig cfg;
  // The variant check needs no device: do it before require_device().
  if (config) variant = &find_variant(e, op, *config);
  const auto& dev = require_device();
  variant = &resolve(e, op, config, cfg, dev.sm_count);
  FUTR_CHECK(cfg.group_m >= 1, "FP8 GEMM: group_m={} must be >= 1", cfg.group_m);
  FUTR_CHECK(cfg.grid >= 0, "FP8 GEMM: grid={} must be >= 0", cfg.grid);
  const int tiles = ceil_div(op.M, cfg.bm) * ceil_div(op.N, cfg.bn);
  detail::GemmLaunch l{};
  const TmaElem el = op.input == I::kE4M3 ? TmaElem::kU8 : TmaElem::kBF16;
  const int esize = op.input == I::kE4M3 ? 1 : 2;
  l.ta = make_tensor_map_2d(op.a, el, uint64_t(op.M), uint64_t(op.K), uint64_t(op.K) * esize,
                            uint32_t(cfg.bm), uint32_t(128 / esize));
  l.tb = make_tensor_map_2d(op.b, el, uint64_t(op.N), uint64_t(op.K), uint64_t(op.K) * esize,
                            uint32_t(cfg.bn), uint32_t(128 / esize));
  l.M = op.M;
  l.N = op.N;
  l.K = op.K;
  l.group_m = cfg.group_m;
  l.grid = std::min(tiles, cfg.grid > 0 ? cfg.grid : dev.sm_count);
  l.stream = s;
  return l;
}
}  // namespace

std::span<const GemmVariant> gemm_variants() { return kGemmVariants; }

const GemmVariant* nearest_gemm_variant(GemmEpilogue e, GemmInput in, const GemmConfig& c) {
  // Distance: tile shape and depth on a log scale, a schedule mismatch counts as one doubling.
  auto dist = [&](const GemmVariant& v) {
    auto l = [](int a, int b) { return std::fabs(std::log2(double(std::max(a, 1)) / std::max(b, 1))); };
    return l(v.bm, c.bm) + l(v.bn, c.bn) + l(v.stages, c.stages) + (v.pingpong != c.pingpong ? 1.0 : 0.0) +
           (v.promoted != wants_promoted(in, c) ? 4.0 : 0.0);  // the accumulation mode first
  };
  const GemmVariant* best = nullptr;
  for (const auto& v : kGemmVariants)
    if (v.epilogue == e && v.input == in && (!best || dist(v) < dist(*best))) best = &v;
  return best;
}

std::string to_string(const GemmVariant& v) {
  return fmt::format("{}x{} stages {}{}{}", v.bm, v.bn, v.stages, v.pingpong ? " ping-pong" : "",
                     v.promoted ? " promoted" : "");
}

std::string to_string(GemmEpilogue e) {
  switch (e) {
    case E::kScaledOut: return "scaled_out";
    case E::kResidualSumSq: return "residual_sumsq";
    case E::kRmsScaledOut: return "rms_scaled_out";
    case E::kSwiGluFp8: return "swiglu_fp8";
    case E::kQkvRopePacked: return "qkv_rope_packed";
    case E::kQkvRopePadded: return "qkv_rope_padded";
  }
  return "?";
}
std::string to_string(GemmInput i) { return i == I::kE4M3 ? "e4m3" : "bf16"; }
std::string to_string(const GemmConfig& c) {
  return fmt::format("{}x{}x128B s{} g{}{}{}{}", c.bm, c.bn, c.stages, c.group_m, c.pingpong ? " pp" : "",
                     c.fast_accum ? " fast" : "", c.grid ? fmt::format(" grid{}", c.grid) : std::string());
}

GemmConfig choose_gemm_config(GemmEpilogue e, GemmInput in, int M, int N, int K, int sm_count,
                              bool fast_accum) {
  FUTR_CHECK(sm_count >= 1, "choose_gemm_config: sm_count={}", sm_count);
  GemmConfig mode;
  mode.fast_accum = fast_accum;
  const bool promoted = wants_promoted(in, mode);
  const GemmVariant* best = nullptr;
  double best_cost = 0;
  for (const auto& v : kGemmVariants) {
    if (v.epilogue != e || v.input != in || v.promoted != promoted) continue;
    // Time ~ waves x per-tile time, per-tile time ~ tile area / efficiency.
    // Efficiencies relative to cooperative 128x256, fitted to the H200 runs in
    // docs/PERF.md: a 128-wide cooperative tile re-reads B twice as often and
    // still pays its epilogue (0.92); ping-pong hides the epilogue behind the
    // other warpgroup's main loop, which wins while K is short enough for the
    // epilogue to matter (1.08 at K <= 8192, 0.98 beyond) and always for the
    // residual epilogue (its loads are the slowest part of any epilogue).
    const int tiles = ceil_div(M, v.bm) * ceil_div(N, v.bn);
    const int waves = ceil_div(tiles, sm_count);
    double eff = 1.0;
    if (v.pingpong) eff = (e == E::kResidualSumSq || K <= 8192) ? 1.08 : 0.98;
    else if (v.bn < 256) eff = 0.92;
    const double cost = double(waves) * v.bm * v.bn / eff;
    if (!best || cost < best_cost * 0.99 || (cost <= best_cost * 1.01 && v.bn > best->bn)) {
      best = &v;
      best_cost = cost;
    }
  }
  FUTR_CHECK(best != nullptr, "FP8 GEMM: no compiled variant for {} with {} inputs{}", to_string(e),
             to_string(in), promoted ? " and promoted accumulation" : "");
  GemmConfig c;
  c.fast_accum = fast_accum;
  c.bm = best->bm;
  c.bn = best->bn;
  c.stages = best->stages;
  c.pingpong = best->pingpong;
  c.group_m = 8;  // measured best of 8, 16, 32 on the 8B shapes (docs/PERF.md)
  return c;
}

void gemm_scaled_out(const GemmOperands& op, const ScaledOutArgs& args, cudaStream_t stream,
                     const GemmConfig* config) {
  check_operands(op, E::kScaledOut);
  ScaledOutArgs a = args;
  check_bf16_out(a.out, a.ld_out, op.N, "out");
  const GemmVariant* v = nullptr;
  const auto l = prepare(E::kScaledOut, op, config, stream, v);
  detail::launch_scaled_out(*v, l, a);
}

void gemm_residual_sumsq(const GemmOperands& op, const ResidualSumSqArgs& args, cudaStream_t stream,
                         const GemmConfig* config) {
  check_operands(op, E::kResidualSumSq);
  ResidualSumSqArgs a = args;
  check_bf16_out(a.out, a.ld_out, op.N, "out");
  check_bf16_out(a.residual, a.ld_res, op.N, "residual");
  FUTR_CHECK(a.row_sumsq != nullptr, "FP8 GEMM residual_sumsq: row_sumsq must be non-null");
  const GemmVariant* v = nullptr;
  const auto l = prepare(E::kResidualSumSq, op, config, stream, v);
  FUTR_CUDA_CHECK(cudaMemsetAsync(a.row_sumsq, 0, size_t(op.M) * sizeof(float), stream));
  detail::launch_residual_sumsq(*v, l, a);
}

void gemm_rms_scaled_out(const GemmOperands& op, const RmsScaledOutArgs& args, cudaStream_t stream,
                         const GemmConfig* config) {
  check_operands(op, E::kRmsScaledOut);
  RmsScaledOutArgs a = args;
  check_bf16_out(a.out, a.ld_out, op.N, "out");
  FUTR_CHECK(a.row_sumsq != nullptr && a.hidden >= 1 && a.eps >= 0 && std::isfinite(a.eps),
             "FP8 GEMM rms_scaled_out: need row_sumsq, hidden >= 1 (got {}), finite eps >= 0 (got {})",
             a.hidden, a.eps);
  const GemmVariant* v = nullptr;
  const auto l = prepare(E::kRmsScaledOut, op, config, stream, v);
  detail::launch_rms_scaled_out(*v, l, a);
}

void gemm_swiglu_fp8(const GemmOperands& op, const SwiGluFp8Args& args, cudaStream_t stream,
                     const GemmConfig* config) {
  check_operands(op, E::kSwiGluFp8);
  SwiGluFp8Args a = args;
  FUTR_CHECK(a.out != nullptr, "FP8 GEMM swiglu_fp8: out must be non-null");
  if (a.ld_out == 0) a.ld_out = op.N / 2;
  FUTR_CHECK(a.ld_out >= op.N / 2 && a.ld_out % 2 == 0,
             "FP8 GEMM swiglu_fp8: out row stride {} must be >= N/2={} and even", a.ld_out, op.N / 2);
  FUTR_CHECK(a.scale_in && a.amax_out && a.saturation_out,
             "FP8 GEMM swiglu_fp8: scale_in, amax_out and saturation_out must be non-null device pointers");
  const GemmVariant* v = nullptr;
  const auto l = prepare(E::kSwiGluFp8, op, config, stream, v);
  detail::launch_swiglu_fp8(*v, l, a);
}

namespace {
void check_qkv(const GemmOperands& op, QkvRopeArgs& a) {
  FUTR_CHECK(a.head_dim == 64 || a.head_dim == 128, "FP8 GEMM qkv_rope: head_dim {} (supported: 64, 128)",
             a.head_dim);
  FUTR_CHECK(a.heads >= 1 && a.kv_heads >= 1 && op.N == (a.heads + 2 * a.kv_heads) * a.head_dim,
             "FP8 GEMM qkv_rope: N={} must equal (heads {} + 2 x kv_heads {}) x head_dim {}", op.N, a.heads,
             a.kv_heads, a.head_dim);
  check_bf16_out(a.q_out, a.ld_q, a.heads * a.head_dim, "q_out");
  FUTR_CHECK(a.k_cache && a.v_cache && a.num_slots >= 1 && a.inv_freq,
             "FP8 GEMM qkv_rope: k_cache, v_cache, inv_freq and num_slots >= 1 are required");
}
}  // namespace

void gemm_qkv_rope(const GemmOperands& op, const QkvRopeArgs& args, const PackedRowMap& rows,
                   cudaStream_t stream, const GemmConfig* config) {
  check_operands(op, E::kQkvRopePacked);
  QkvRopeArgs a = args;
  check_qkv(op, a);
  FUTR_CHECK(
      rows.cu_rows && rows.start_pos && rows.slot_base && rows.num_requests >= 1,
      "FP8 GEMM qkv_rope (packed): the row map needs cu_rows, start_pos, slot_base, num_requests >= 1");
  const GemmVariant* v = nullptr;
  const auto l = prepare(E::kQkvRopePacked, op, config, stream, v);
  detail::launch_qkv_rope_packed(*v, l, a, rows);
}

void gemm_qkv_rope(const GemmOperands& op, const QkvRopeArgs& args, const PaddedRowMap& rows,
                   cudaStream_t stream, const GemmConfig* config) {
  check_operands(op, E::kQkvRopePadded);
  QkvRopeArgs a = args;
  check_qkv(op, a);
  FUTR_CHECK(rows.lengths && rows.start_pos && rows.slot_base && rows.num_requests >= 1 &&
                 rows.max_len >= 1 && int64_t(rows.num_requests) * rows.max_len == op.M,
             "FP8 GEMM qkv_rope (padded): need lengths, start_pos, slot_base and M={} == num_requests {} x "
             "max_len {}",
             op.M, rows.num_requests, rows.max_len);
  const GemmVariant* v = nullptr;
  const auto l = prepare(E::kQkvRopePadded, op, config, stream, v);
  detail::launch_qkv_rope_padded(*v, l, a, rows);
}

}  // namespace futr::cuda
