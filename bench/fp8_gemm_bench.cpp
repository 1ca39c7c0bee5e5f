// fp8_gemm_bench: the FP8 prefill GEMM (src/launch/fp8_gemm.h) on the Llama-3.1
// projection shapes, against cuBLASLt FP8 and the FP8 peak measured in the
// same run. One row per (model, projection, M, policy):
//
//   plain      our GEMM with the scaled BF16 epilogue (C = a_s b_s[n] A B^T),
//              promoted accumulation (the default: each K stage's tensor-core
//              sum added in FP32)
//   fast       the same with fast accumulation (the whole K sum in the tensor
//              cores; GemmConfig::fast_accum), its own heuristic's tile
//   cuBLASLt   cuBLASLt E4M3 x E4M3, per-tensor scales, BF16 out (the same
//              operation up to the per-channel scale, which only costs us), in
//              its default mode (promoted: lt_ms, x_lt) and with
//              CUBLASLT_MATMUL_DESC_FAST_ACCUM (lt_fast_ms, x_lt_fast)
//   policy     the projection's fused epilogue: QKV -> RoPE + KV-cache write
//              (and folded-RMSNorm scaled output), O and down -> residual +
//              row sums of squares, gate/up -> SwiGLU + delayed-scaling FP8
//
// TFLOP/s counts 2*M*N*K; "% peak" is against cuBLASLt FP8 8192^3 measured at
// start (bench/common/harness.h). Times are medians with a cold L2. The
// PyTorch peers (torch._scaled_mm, torch.compile'd blocks) are measured by
// bench/peers/torch_prefill_peer.py on the same machine, which merges its
// JSON with this one (scripts/gpu-check.sh runs both).
//
//   usage: fp8_gemm_bench [--models 8b,70b] [--proj qkv,o,gateup,down]
//                         [--m 512,2048,8192,16384] [--bn 256 --stages 4]
//                         [--group-m 8] [--grid 0] [--pingpong] [--fast-accum] [--bf16] [--no-lt]
//                         [--compare-schedules] [--res-pad 0] [--reps 30] [--json PATH]
//
// --compare-schedules also times the other consumer schedule (alt_* columns):
// ping-pong 128x128 when the heuristic chose cooperative 128x256 and back.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/harness.h"
#include "core/error.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/cublaslt.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/fp8_gemm.h"
#include "launch/stream.h"

using namespace futr;

namespace {

struct Model {
  std::string name;
  int hidden, heads, kv_heads, head_dim, inter;
};
const Model kModels[] = {{"8b", 4096, 32, 8, 128, 14336}, {"70b", 8192, 64, 8, 128, 28672}};

struct Shape {
  std::string proj;
  int N, K;
};
std::vector<Shape> shapes_of(const Model& m) {
  const int qkv = (m.heads + 2 * m.kv_heads) * m.head_dim;
  return {{"qkv", qkv, m.hidden},
          {"o", m.hidden, m.heads * m.head_dim},
          {"gateup", 2 * m.inter, m.hidden},
          {"down", m.hidden, m.inter}};
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  for (const auto& s : v)
    if (s == x) return true;
  return false;
}

struct Options {
  std::vector<std::string> models{"8b", "70b"}, projs{"qkv", "o", "gateup", "down"};
  std::vector<int> ms{512, 2048, 8192, 16384};
  bool override_cfg = false;
  cuda::GemmConfig cfg;
  bool bf16 = false, lt = true;
  bool compare = false;  // also time the other consumer schedule (cooperative 128x256 <-> ping-pong 128x128)
  int res_pad = 0;  // residual row stride N + res_pad (a stride % 8 != 0 disables the residual L2 prefetch)
  int reps = 30;
  std::string json;
};

Options parse(int argc, char** argv) {
  Options o;
  auto next = [&](int& i) -> std::string {
    FUTR_CHECK(i + 1 < argc, "{} needs a value", argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--models") o.models = bench::split_list(next(i));
    else if (a == "--proj") o.projs = bench::split_list(next(i));
    else if (a == "--m") o.ms = bench::split_ints(next(i));
    else if (a == "--bn") {
      o.cfg.bn = std::stoi(next(i));
      o.override_cfg = true;
    } else if (a == "--stages") {
      o.cfg.stages = std::stoi(next(i));
      o.override_cfg = true;
    } else if (a == "--group-m") {
      o.cfg.group_m = std::stoi(next(i));
      o.override_cfg = true;
    } else if (a == "--grid") {
      o.cfg.grid = std::stoi(next(i));
      o.override_cfg = true;
    } else if (a == "--pingpong") {
      o.cfg.pingpong = true;
      o.override_cfg = true;
    } else if (a == "--fast-accum") {
      o.cfg.fast_accum = true;
      o.override_cfg = true;
    } else if (a == "--bf16") o.bf16 = true;
    else if (a == "--compare-schedules") o.compare = true;
    else if (a == "--res-pad") o.res_pad = std::stoi(next(i));
    else if (a == "--no-lt") o.lt = false;
    else if (a == "--reps") o.reps = std::stoi(next(i));
    else if (a == "--json") o.json = next(i);
    else fail("unknown argument {} (see the usage in bench/fp8_gemm_bench.cpp)", a);
  }
  return o;
}

double tflops(double M, double N, double K, double ms) { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; }

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    std::string why;
    if (!cuda::probe_device(&why)) {
      std::fprintf(stderr, "fp8_gemm_bench: %s\n", why.c_str());
      return 2;
    }
    const auto& dev = cuda::require_device();
    cuda::Stream s;
    bench::Ceilings ceil{};
    std::string ceil_error;
    try {
      ceil = bench::measure_ceilings(s);
    } catch (const std::exception& e) {
      ceil_error = e.what();  // the Python peer's torch._scaled_mm 8192^3 then serves as the peak
      cudaGetLastError();
    }
    const double peak = ceil.fp8_tflops;

    bench::Report rep("FP8 prefill GEMM (ours vs cuBLASLt)", {"model",
                                                              "proj",
                                                              "M",
                                                              "N",
                                                              "K",
                                                              "policy",
                                                              "input",
                                                              "config",
                                                              "plain_ms",
                                                              "plain_tflops",
                                                              "pct_peak",
                                                              "lt_ms",
                                                              "x_lt",
                                                              "fast_config",
                                                              "fast_ms",
                                                              "lt_fast_ms",
                                                              "x_lt_fast",
                                                              "policy_config",
                                                              "policy_ms",
                                                              "policy_tflops",
                                                              "policy_vs_plain",
                                                              "alt_config",
                                                              "alt_plain_ms",
                                                              "alt_policy_ms"});
    rep.set_meta("fp8_peak_tflops", peak);
    rep.set_meta("bf16_peak_tflops", ceil.bf16_tflops);
    rep.set_meta("copy_gbs", ceil.copy_gbs);
    if (!ceil_error.empty()) rep.set_meta("ceilings_error", ceil_error);
    cuda::CublasLt lt;
    std::string lt_error;

    const int max_m = *std::max_element(opt.ms.begin(), opt.ms.end());
    for (const Model& mdl : kModels) {
      if (!contains(opt.models, mdl.name)) continue;
      for (const Shape& sh : shapes_of(mdl)) {
        if (!contains(opt.projs, sh.proj)) continue;
        const int N = sh.N, K = sh.K;
        // Weights once per shape; activations sized for the largest M.
        cuda::DeviceBuffer<uint8_t> b(size_t(N) * K * (opt.bf16 ? 2 : 1)),
            a(size_t(max_m) * K * (opt.bf16 ? 2 : 1));
        const auto ft = opt.bf16 ? cuda::FillType::kBF16 : cuda::FillType::kE4M3;
        cuda::fill_random(b.get(), ft, size_t(N) * K, 11, -1, 1, s);
        cuda::fill_random(a.get(), ft, size_t(max_m) * K, 12, -2, 2, s);
        cuda::DeviceBuffer<float> scl(2 + size_t(N));
        cuda::fill_random(scl.get(), cuda::FillType::kF32, 2 + size_t(N), 13, 0.01f, 0.02f, s);
        const float* a_scale = scl.get();
        const float* lt_b_scale = scl.get() + 1;
        const float* b_scale = scl.get() + 2;
        const int ld_res = N + opt.res_pad;
        cuda::DeviceBuffer<uint16_t> out(size_t(max_m) * N), res(size_t(max_m) * ld_res);
        cuda::fill_random(res.get(), cuda::FillType::kBF16, size_t(max_m) * ld_res, 14, -1, 1, s);
        for (int M : opt.ms) {
          const cuda::GemmInput in = opt.bf16 ? cuda::GemmInput::kBF16 : cuda::GemmInput::kE4M3;
          const cuda::GemmOperands op{a.get(), b.get(), M, N, K, in};
          const cuda::GemmConfig cfg =
              opt.override_cfg
                  ? opt.cfg
                  : cuda::choose_gemm_config(cuda::GemmEpilogue::kScaledOut, in, M, N, K, dev.sm_count);
          // Reps: about 0.4 s of kernel time per measurement, at least 10.
          const double est_ms = 2.0 * M * N * double(K) / 1.0e15 * 1e3;
          const int reps = std::max(10, std::min(opt.reps, int(400.0 / std::max(est_ms, 1e-3))));
          const bench::TimeOptions topt{3, reps, true};
          const cuda::GemmScales sc{opt.bf16 ? nullptr : a_scale, opt.bf16 ? nullptr : b_scale};
          const double plain_ms = bench::time_median_ms(
              [&](cudaStream_t st) {
                cuda::gemm_scaled_out(op, {sc, out.get(), 0}, st, &cfg);
              },
              s, topt);
          // The other schedule (same group_m / grid), where compiled.
          auto other = [&](cuda::GemmConfig c) {
            if (c.pingpong) {
              c.pingpong = false;
              c.bn = 256;
              c.stages = 4;
            } else {
              c.pingpong = true;
              c.bn = 128;
              c.stages = 6;
            }
            return c;
          };
          auto try_time = [&](const std::function<void(cudaStream_t)>& fn) -> double {
            try {
              return bench::time_median_ms(fn, s, topt);
            } catch (const Error&) {
              return 0.0;  // not compiled for this policy
            }
          };
          const cuda::GemmConfig alt = other(cfg);
          const double alt_plain_ms = opt.compare && !opt.bf16 ? try_time([&](cudaStream_t st) {
            cuda::gemm_scaled_out(op, {sc, out.get(), 0}, st, &alt);
          })
                                                               : 0.0;
          // Fast accumulation, its heuristic's tile (E4M3 only).
          const cuda::GemmConfig fcfg =
              cuda::choose_gemm_config(cuda::GemmEpilogue::kScaledOut, in, M, N, K, dev.sm_count, true);
          const double fast_ms = opt.bf16 ? 0.0 : try_time([&](cudaStream_t st) {
            cuda::gemm_scaled_out(op, {sc, out.get(), 0}, st, &fcfg);
          });
          auto time_lt = [&](cuda::LtInput li) {
            try {
              return bench::time_median_ms(
                  [&](cudaStream_t st) {
                    lt.matmul(li, a.get(), b.get(), out.get(), M, N, K, opt.bf16 ? nullptr : a_scale,
                              opt.bf16 ? nullptr : lt_b_scale, st);
                  },
                  s, topt);
            } catch (const std::exception& e) {
              lt_error = e.what();
              cudaGetLastError();
              return 0.0;
            }
          };
          const double lt_ms = opt.lt ? time_lt(opt.bf16 ? cuda::LtInput::kBF16 : cuda::LtInput::kE4M3) : 0.0;
          const double lt_fast_ms = opt.lt && !opt.bf16 ? time_lt(cuda::LtInput::kE4M3FastAccum) : 0.0;
          auto row = [&](const std::string& policy, double pol_ms, const cuda::GemmConfig& pcfg,
                         double alt_pol_ms, const cuda::GemmConfig& palt) {
            nlohmann::json r{{"model", mdl.name},
                             {"proj", sh.proj},
                             {"M", M},
                             {"N", N},
                             {"K", K},
                             {"policy", policy},
                             {"input", cuda::to_string(in)},
                             {"config", cuda::to_string(cfg)},
                             {"plain_ms", plain_ms},
                             {"plain_tflops", tflops(M, N, K, plain_ms)}};
            if (peak > 0) r["pct_peak"] = 100.0 * tflops(M, N, K, plain_ms) / peak;
            if (lt_ms > 0) {
              r["lt_ms"] = lt_ms;
              r["x_lt"] = lt_ms / plain_ms;
            }
            if (fast_ms > 0) {
              r["fast_config"] = cuda::to_string(fcfg);
              r["fast_ms"] = fast_ms;
            }
            if (lt_fast_ms > 0 && fast_ms > 0) {
              r["lt_fast_ms"] = lt_fast_ms;
              r["x_lt_fast"] = lt_fast_ms / fast_ms;
            }
            if (opt.compare) {
              r["alt_config"] = cuda::to_string(palt);
              if (alt_plain_ms > 0) r["alt_plain_ms"] = alt_plain_ms;
              if (alt_pol_ms > 0) r["alt_policy_ms"] = alt_pol_ms;
            }
            if (pol_ms > 0) {
              r["policy_config"] = cuda::to_string(pcfg);
              r["policy_ms"] = pol_ms;
              r["policy_tflops"] = tflops(M, N, K, pol_ms);
              r["policy_vs_plain"] = plain_ms / pol_ms;
            }
            rep.add(r);
            std::fprintf(
                stderr,
                "  %s %s M=%d: plain %.3f ms (alt %.3f, fast %.3f), lt %.3f ms (fast %.3f), %s %.3f ms "
                "(alt %.3f)\n",
                mdl.name.c_str(), sh.proj.c_str(), M, plain_ms, alt_plain_ms, fast_ms, lt_ms, lt_fast_ms,
                policy.c_str(), pol_ms, alt_pol_ms);
          };
          if (opt.bf16) {
            row("plain", 0, cfg, 0, alt);
            continue;
          }
          // A policy's config: the heuristic's for that policy (or the override),
          // and its alternative schedule when --compare-schedules.
          auto pcfg_of = [&](cuda::GemmEpilogue e) {
            return opt.override_cfg ? opt.cfg : cuda::choose_gemm_config(e, in, M, N, K, dev.sm_count);
          };
          auto time_policy = [&](cuda::GemmEpilogue e, const std::string& name,
                                 const std::function<void(cudaStream_t, const cuda::GemmConfig*)>& fn) {
            const cuda::GemmConfig pc = pcfg_of(e), pa = other(pc);
            const double ms = try_time([&](cudaStream_t st) { fn(st, &pc); });
            const double ams = opt.compare ? try_time([&](cudaStream_t st) { fn(st, &pa); }) : 0.0;
            row(name, ms, pc, ams, pa);
          };
          // The projection's fused epilogue.
          if (sh.proj == "qkv") {
            // Packed prefill: requests of 2048 tokens (the last one shorter), fresh cache.
            std::vector<int> cu{0}, sp, sb;
            for (int r0 = 0; r0 < M; r0 += 2048) {
              sp.push_back(0);
              sb.push_back(r0);
              cu.push_back(std::min(M, r0 + 2048));
            }
            cuda::DeviceBuffer<int> cu_d(cu), sp_d(sp), sb_d(sb);
            std::vector<float> freq(size_t(mdl.head_dim / 2));
            for (size_t i = 0; i < freq.size(); ++i)
              freq[i] = std::pow(500000.0f, -2.0f * float(i) / mdl.head_dim);
            cuda::DeviceBuffer<float> freq_d(freq);
            const int kvc = mdl.kv_heads * mdl.head_dim;
            cuda::DeviceBuffer<uint16_t> kc(size_t(M) * kvc), vc(size_t(M) * kvc);
            const cuda::QkvRopeArgs qa{
                sc, freq_d.get(), mdl.heads, mdl.kv_heads, mdl.head_dim, out.get(), 0, kc.get(), vc.get(), M};
            const cuda::PackedRowMap rm{cu_d.get(), sp_d.get(), sb_d.get(), int(sp.size())};
            time_policy(
                cuda::GemmEpilogue::kQkvRopePacked, "qkv_rope",
                [&](cudaStream_t st, const cuda::GemmConfig* c) { cuda::gemm_qkv_rope(op, qa, rm, st, c); });
            cuda::DeviceBuffer<float> ss{size_t(M)};
            cuda::fill_random(ss.get(), cuda::FillType::kF32, size_t(M), 15, 1000, 5000, s);
            time_policy(cuda::GemmEpilogue::kRmsScaledOut, "rms_scaled_out",
                        [&](cudaStream_t st, const cuda::GemmConfig* c) {
                          cuda::gemm_rms_scaled_out(op, {sc, ss.get(), K, 1e-5f, out.get(), 0}, st, c);
                        });
          } else if (sh.proj == "gateup") {
            cuda::DeviceBuffer<uint8_t> q8(size_t(M) * N / 2);
            cuda::DeviceBuffer<float> st3(2);
            cuda::DeviceBuffer<uint32_t> sat(1);
            cuda::fill_random(st3.get(), cuda::FillType::kF32, 1, 16, 0.01f, 0.02f, s);
            const cuda::SwiGluFp8Args ga{sc, q8.get(), 0, st3.get(), st3.get() + 1, sat.get()};
            time_policy(
                cuda::GemmEpilogue::kSwiGluFp8, "swiglu_fp8",
                [&](cudaStream_t st, const cuda::GemmConfig* c) { cuda::gemm_swiglu_fp8(op, ga, st, c); });
          } else {
            cuda::DeviceBuffer<float> ss{size_t(M)};
            time_policy(
                cuda::GemmEpilogue::kResidualSumSq, "residual_sumsq",
                [&](cudaStream_t st, const cuda::GemmConfig* c) {
                  cuda::gemm_residual_sumsq(op, {sc, res.get(), ld_res, out.get(), 0, ss.get()}, st, c);
                });
          }
        }
      }
    }
    if (!lt_error.empty()) rep.set_meta("cublaslt_error", lt_error);
    rep.emit(opt.json);
    std::printf("FP8 peak (cuBLASLt 8192^3): %.1f TFLOP/s%s\n", peak,
                ceil_error.empty() ? "" : (" [ceilings failed: " + ceil_error + "]").c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8_gemm_bench: %s\n", e.what());
    return 1;
  }
}
