// The engine options of `futr generate` and `futr perplexity` (and the
// quantizer options `futr quantize` shares), parsed into the typed
// runtime::RuntimeConfig that make_engine() (runtime/engine.h) reads. The CLI
// knows the flags' spellings only through the runtime's parse_*() functions.
//
//   --backend cpu|gpu|auto          (cli/common.h) the engine; auto says on
//       stderr which engine it chose and why.
//   --weights auto|fp32|bf16|fp8|int4
//       auto: fp32 for an unquantized model (GGUF, Hugging Face), the file's
//       own format for a .futr file (int4 if it holds INT4, else fp8, else bf16).
//       An unquantized model is quantized on load (fp8 per channel; bf16; int4
//       with --quant). A .futr file is used as stored: it must hold the format
//       asked for, and --quant is refused (no double quantization).
//   --quant rtn|clip|clip-act|gptq|gptq-clip   INT4 quantizer on load (default rtn,
//       fast and uncalibrated); clip-act and gptq* run the calibration (see
//       --calib-*) first, which takes minutes: `futr quantize` once (its default
//       is gptq-clip with act-order, cli/quantize.cpp) and load the .futr file.
//   --act-order                     GPTQ processes inputs by decreasing activity
//       (off on load; `futr quantize` has it on for gptq*, --no-act-order there).
//   --head bf16|int4                the GPU engine's LM head: as stored (BF16), or
//       quantized to INT4 at load (gpu::GpuEngineOptions::lm_head_int4).
//   --kv auto|fp32|bf16|int4|int4-rot   KV cache format (auto: fp32 with fp32
//       weights, else bf16).
//   --kv-block N                    Hadamard block of int4-rot (16, 32, 64 ...;
//       default runtime::kDefaultKvBlock, capped at head_dim).
//   --fp8-scaling static|delayed, --fp8-history N, --fp8-margin X, --fp8-policy clamp|recompute
//                                   delayed FP8 scaling (quant/delayed_scaling.h).
//   --fp8-rms epilogue|cast         folded RMSNorm: row factor after the GEMM (the
//                                   design) or before the E4M3 cast (variant).
//   --fp8-numerics cpu|gpu          the CPU FP8 reference's roundings; gpu (BF16
//                                   residual and q/k/v, SwiGLU cast from FP32) with
//                                   --fp8-rms cast is the GPU prefill path's numerics.
// Calibration (quantizing on load, `futr quantize`): --calib-file (default: the
// perplexity text), --calib-tokens (16384), --calib-ctx (512); the tokens come
// from the LAST 10% of the file's tokens (runtime/calibration.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/common.h"
#include "runtime/config.h"

namespace futr::cli {

struct QuantCliOptions {
  std::string weights = "auto";  // auto | fp32 | bf16 | fp8 | int4
  std::string quant;             // rtn | clip | clip-act | gptq | gptq-clip ("" = not given: rtn on load,
                                 // gptq-clip in `futr quantize`)
  bool act_order = false;
  int group = 0;              // INT4 group (0: 128, or 64 where K % 128 != 0)
  std::string head = "bf16";  // bf16 | int4: the GPU engine's LM head
  std::string kv = "auto";    // auto | fp32 | bf16 | int4 | int4-rot
  int kv_block = 0;           // 0: runtime::kDefaultKvBlock
  int fp8_history = 16;
  float fp8_margin = 1.0f;
  std::string fp8_policy = "clamp";    // clamp | recompute
  std::string fp8_scaling = "static";  // static | delayed (runtime::Fp8Config::scaling)
  std::string fp8_rms = "epilogue";    // epilogue (the design) | cast (1/rms before the E4M3 cast)
  std::string fp8_numerics =
      "cpu";               // cpu | gpu: the CPU FP8 reference's roundings (runtime::Fp8Config::gpu_numerics)
  std::string calib_file;  // "" = the default perplexity text
  int calib_tokens = 16384;
  int calib_ctx = 512;
};

// --weights, --quant, --act-order, --group, --kv, --kv-block, --fp8-*.
void add_quant_options(CLI::App* app, QuantCliOptions& o);
// --calib-file, --calib-tokens, --calib-ctx.
void add_calibration_options(CLI::App* app, QuantCliOptions& o);

// The quantizer fields of a RuntimeConfig (quant, act_order, group, calib).
void parse_quantizer_options(const QuantCliOptions& o, runtime::RuntimeConfig& c);

// The whole RuntimeConfig of a command: engine, ctx, threads from `run`,
// formats and quantizer from `q` (futr::Error naming a bad flag value).
runtime::RuntimeConfig runtime_config(const RunOptions& run, const QuantCliOptions& q);

}  // namespace futr::cli
