// Engine options parsed into a RuntimeConfig (see engine_options.h).
#include "cli/engine_options.h"

#include <fmt/format.h>

#include "core/error.h"

namespace futr::cli {

void add_quant_options(CLI::App* app, QuantCliOptions& o) {
  app->add_option("--weights", o.weights,
                  "Weight format of the CPU reference: auto|fp32|bf16|fp8|int4 (auto: fp32, or the "
                  ".futr file's own format)")
      ->check(CLI::IsMember(runtime::weight_format_names()))
      ->capture_default_str();
  app->add_option(
         "--quant", o.quant,
         fmt::format("INT4 quantizer when quantizing on load: {} (default {}: fast, uncalibrated; "
                     "`futr quantize` defaults to gptq-clip with act-order)",
                     fmt::join(runtime::quant_method_names(), "|"), to_string(runtime::QuantMethod::kRtn)))
      ->check(CLI::IsMember(runtime::quant_method_names()));
  app->add_flag("--act-order", o.act_order,
                "GPTQ on load: quantize inputs by decreasing activity (off by default)");
  app->add_option("--group", o.group, "INT4 group size 64|128 (default: 128, 64 where K % 128 != 0)")
      ->check(CLI::IsMember({0, 64, 128}));
  app->add_option(
         "--head", o.head,
         "LM head of the GPU engine: bf16 (as stored) | int4 (quantized at load, RTN with FP16 scales per "
         "group of 128, 64 where the hidden size is not a multiple of 128; the accuracy cost: "
         "docs/ACCURACY.md)")
      ->check(CLI::IsMember({"bf16", "int4"}))
      ->capture_default_str();
  app->add_option("--kv", o.kv,
                  "KV cache format: auto|fp32|bf16|int4|int4-rot (auto: fp32 with fp32 weights, "
                  "else bf16)")
      ->check(CLI::IsMember(runtime::kv_format_names()))
      ->capture_default_str();
  app->add_option("--kv-block", o.kv_block,
                  fmt::format("Hadamard block size of --kv int4-rot (default {}, at most head_dim)",
                              runtime::kDefaultKvBlock))
      ->check(CLI::Range(1, 1024));
  app->add_option(
         "--fp8-scaling", o.fp8_scaling,
         "FP8 activation scales: static (one calibrated scale per site: a request's numbers never depend "
         "on another's) | delayed (the amax history of earlier calls, kept per request)")
      ->check(CLI::IsMember(runtime::fp8_scaling_names()))
      ->capture_default_str();
  app->add_option("--fp8-history", o.fp8_history, "FP8 delayed scaling: amax history length (calls)")
      ->capture_default_str();
  app->add_option("--fp8-margin", o.fp8_margin,
                  "FP8 delayed scaling: headroom factor (>= 1) over the history's amax")
      ->capture_default_str();
  app->add_option("--fp8-policy", o.fp8_policy,
                  "FP8 on saturation: clamp (count, clamp, re-scale next call) | recompute")
      ->check(CLI::IsMember(runtime::fp8_policy_names()))
      ->capture_default_str();
  app->add_option("--fp8-rms", o.fp8_rms,
                  "FP8 folded RMSNorm: 1/rms applied in the GEMM epilogue (the design) or before "
                  "the E4M3 cast")
      ->check(CLI::IsMember(runtime::fp8_rms_names()))
      ->capture_default_str();
  app->add_option(
         "--fp8-numerics", o.fp8_numerics,
         "CPU FP8 reference: cpu (FP32 residual and q/k/v, the SwiGLU output rounded to BF16 before its "
         "cast) or gpu (the GPU prefill path's: BF16 residual, BF16 q/k/v and rotated q, the SwiGLU cast "
         "from FP32); with --fp8-rms cast, gpu is the numerics of --backend gpu --prefill")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
}

void add_calibration_options(CLI::App* app, QuantCliOptions& o) {
  app->add_option("--calib-file", o.calib_file,
                  "Calibration text (default: the perplexity text); its last 10% of tokens are used");
  app->add_option("--calib-tokens", o.calib_tokens, "Calibration tokens (at most)")
      ->check(CLI::Range(16, 1 << 24))
      ->capture_default_str();
  app->add_option("--calib-ctx", o.calib_ctx, "Calibration window length")
      ->check(CLI::Range(16, 1 << 16))
      ->capture_default_str();
}

void parse_quantizer_options(const QuantCliOptions& o, runtime::RuntimeConfig& c) {
  c.quant = o.quant.empty() ? runtime::QuantMethod::kRtn : runtime::parse_quant_method(o.quant);
  c.quant_given = !o.quant.empty();
  c.act_order = o.act_order;
  c.group = o.group;
  c.calib.file = o.calib_file;
  c.calib.tokens = o.calib_tokens;
  c.calib.ctx = o.calib_ctx;
}

runtime::RuntimeConfig runtime_config(const RunOptions& run, const QuantCliOptions& q) {
  runtime::RuntimeConfig c;
  c.engine = runtime::parse_engine_kind(run.backend);
  c.ctx = run.ctx;
  c.threads = run.threads;
  c.tp = run.tp;
  c.weights = runtime::parse_weight_format(q.weights);
  c.kv = runtime::parse_kv_format(q.kv);
  c.kv_block = q.kv_block;
  c.lm_head_int4 = q.head == "int4";
  c.fp8.history = q.fp8_history;
  c.fp8.margin = q.fp8_margin;
  c.fp8.policy = runtime::parse_fp8_policy(q.fp8_policy);
  c.fp8.scaling = runtime::parse_fp8_scaling(q.fp8_scaling);
  c.fp8.rms = runtime::parse_fp8_rms(q.fp8_rms);
  c.fp8.gpu_numerics = q.fp8_numerics == "gpu";
  c.prefill = runtime::parse_prefill_mode(run.prefill);
  c.prefill_rows = run.prefill_rows;
  parse_quantizer_options(q, c);
  return c;
}

}  // namespace futr::cli
