// The quantized-reference options of `futr generate` and `futr perplexity`,
// and the backend that runs them (cli/backend.h's Backend over
// cpu::QuantForward).
//
//   --weights auto|fp32|bf16|fp8|int4
//       auto: fp32 for an unquantized model (GGUF, Hugging Face), the file's
//       own format for a .futr file (int4 if it holds INT4, else fp8, else bf16).
//       An unquantized model is quantized on load (fp8 per channel; bf16; int4
//       with --quant). A .futr file is used as stored: it must hold the format
//       asked for, and --quant is refused (no double quantization).
//   --quant rtn|clip|clip-act|gptq|gptq-clip   INT4 quantizer on load (default rtn);
//       clip-act and gptq*
//       runs the calibration (see --calib-*) first, which takes minutes:
//       `futr quantize` once and load the .futr file instead.
//   --act-order                     GPTQ processes inputs by decreasing activity.
//   --kv auto|fp32|bf16|int4|int4-rot   KV cache format (auto: fp32 with fp32
//       weights, else bf16).
//   --kv-block N                    Hadamard block of int4-rot (16, 32, 64 ...;
//       default kDefaultKvBlock, capped at head_dim).
//   --fp8-history N, --fp8-margin X, --fp8-policy clamp|recompute
//                                   delayed FP8 scaling (quant/delayed_scaling.h).
//   --fp8-rms epilogue|cast         folded RMSNorm: row factor after the GEMM (the
//                                   design) or before the E4M3 cast (variant).
// Calibration (gptq on load, `futr quantize`): --calib-file (default: the
// perplexity text), --calib-tokens (16384), --calib-ctx (512); the tokens come
// from the LAST 10% of the file's tokens (calibration_tokens()), so they are
// disjoint from an evaluation of its first 90% (docs/ACCURACY.md).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/backend.h"
#include "cpu/model_quant.h"
#include "model/model.h"

namespace futr::cli {

// The Hadamard block size of int4-rot when --kv-block is not given (the best
// of the sweep in docs/ACCURACY.md), capped at head_dim.
inline constexpr int kDefaultKvBlock = 64;

struct QuantCliOptions {
  std::string weights = "auto";  // auto | fp32 | bf16 | fp8 | int4
  std::string quant;             // rtn | clip | clip-act | gptq | gptq-clip ("" = rtn)
  bool act_order = false;
  int group = 0;                 // INT4 group (0: 128, or 64 where K % 128 != 0)
  std::string kv = "auto";       // auto | fp32 | bf16 | int4 | int4-rot
  int kv_block = 0;              // 0: kDefaultKvBlock
  int fp8_history = 16;
  float fp8_margin = 1.0f;
  std::string fp8_policy = "clamp";  // clamp | recompute
  std::string fp8_rms = "epilogue";  // epilogue (the design) | cast (1/rms before the E4M3 cast)
  std::string calib_file;        // "" = the default perplexity text
  int calib_tokens = 16384;
  int calib_ctx = 512;
};

// --weights, --quant, --act-order, --group, --kv, --kv-block, --fp8-*.
void add_quant_options(CLI::App* app, QuantCliOptions& o);
// --calib-file, --calib-tokens, --calib-ctx.
void add_calibration_options(CLI::App* app, QuantCliOptions& o);

// The held-out calibration tokens: the last 10% of the file's tokens (BOS
// first if the tokenizer adds one), at most o.calib_tokens of them.
std::vector<int32_t> calibration_tokens(const Model& model, const QuantCliOptions& o);

// cpu::QuantizeOptions from the flags (format given).
cpu::QuantizeOptions quantize_options(quant::WeightFormat format, const QuantCliOptions& o);

// The backend for these options: the plain backend (make_backend) for fp32
// weights and an fp32 cache, else the quantized CPU reference. `log` gets
// one-line notes (quantizing on load, calibration), may be null.
std::unique_ptr<Backend> make_quant_backend(const Model& model, const BackendOptions& bo,
                                            const QuantCliOptions& o,
                                            const std::function<void(const std::string&)>& log = {});

// FP8 delayed-scaling statistics of a backend made by make_quant_backend
// (a JSON object), or null when it runs no FP8.
nlohmann::json fp8_scaling_report(const Backend& backend);

}  // namespace futr::cli
