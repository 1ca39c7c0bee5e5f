// The typed configuration of a model runtime: what `futr generate`,
// `perplexity`, `bench` and `serve` parse their flags into, and the one thing
// make_engine() (runtime/engine.h) reads. No strings that stand for choices:
// each choice is an enum with to_string()/parse_*() beside it (the parsers are
// the only place a flag's spelling is known; futr::Error names the flag and
// the accepted values).
//
// Formats and quantization choices have one home each, core/number_formats.h
// (re-exported here):
//   WeightFormat  how the seven projections of every layer are stored and run
//                 (fp32 reference, bf16, fp8 prefill, int4 decode);
//   KvFormat      how the KV cache is stored (fp32 reference, the BF16
//                 primary, the INT4 mirror, the INT4 mirror with the block
//                 Walsh-Hadamard rotation);
//   QuantMethod   the INT4 quantizer used when a model is quantized on load;
//   Fp8SaturationPolicy  what a saturating FP8 activation does.
// quant/, cpu_engine/, launch/ and gpu_engine/ use the same enums without
// depending on the runtime; nothing else defines a format enum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/number_formats.h"

namespace futr::runtime {

using futr::fp8_policy_names;
using futr::fp8_scaling_names;
using futr::Fp8SaturationPolicy;
using futr::Fp8Scaling;
using futr::kv_format_names;
using futr::KvFormat;
using futr::parse_fp8_policy;
using futr::parse_fp8_scaling;
using futr::parse_kv_format;
using futr::parse_quant_method;
using futr::parse_weight_format;
using futr::quant_method_names;
using futr::QuantMethod;
using futr::to_string;
using futr::weight_format_names;
using futr::WeightFormat;

enum class EngineKind {
  kAuto,  // the GPU engine when a Hopper GPU is present, else the CPU engine (said on stderr)
  kCpu,   // the CPU engines: FP32 reference, or the quantized reference (any other format)
  kGpu,   // the GPU engine (src/gpu_engine/); a clear error where there is none
};

enum class Fp8RmsPlacement { kEpilogue, kCast };  // folded RMSNorm: after the GEMM | before the cast

std::string to_string(EngineKind k);       // "auto" | "cpu" | "gpu"
std::string to_string(Fp8RmsPlacement p);  // "epilogue" | "cast"
// The spellings above; futr::Error naming the accepted values for anything else.
EngineKind parse_engine_kind(const std::string& s);
Fp8RmsPlacement parse_fp8_rms(const std::string& s);
// The accepted spellings, for help texts and CLI11 checks ({"auto", "cpu", "gpu"}, ...);
// those of the formats, the INT4 quantizer and the FP8 policy come from core/number_formats.h.
std::vector<std::string> engine_kind_names();
std::vector<std::string> fp8_rms_names();

// The Hadamard block of int4-rot when none is given (the best of the sweep in
// docs/ACCURACY.md), capped at head_dim.
inline constexpr int kDefaultKvBlock = 64;

// Positions per block of a paged KV cache where the engine's default is asked
// for (RuntimeConfig::kv_block_size -1, `futr serve`): the CPU engine pages in
// blocks of kDefaultKvBlockSize, the GPU engine of kDefaultGpuKvBlockSize (its
// prefill attention loads one TMA box per block: 64 rows are two boxes per
// 128-key tile; its decode attention looks a block up per 16 keys, whatever B).
inline constexpr int kDefaultKvBlockSize = 16;
inline constexpr int kDefaultGpuKvBlockSize = 64;

// Sequences `futr serve` decodes at once where --max-seqs is not given: the
// CPU engine computes a step's sequences one after another (a few keep each
// request's time per token bounded); the GPU engine runs up to 32 rows in one
// decode micro-step for about the time of a few (docs/PERF.md, "Decode step").
inline constexpr int kDefaultServeSeqsCpu = 8;
inline constexpr int kDefaultServeSeqsGpu = 32;

struct Fp8Config {
  Fp8Scaling scaling = Fp8Scaling::kStatic;  // static per site | delayed per request
  int history = 16;                          // amax history length (calls)
  float margin = 1.0f;                       // headroom factor >= 1
  Fp8SaturationPolicy policy = Fp8SaturationPolicy::kClampRescale;
  Fp8RmsPlacement rms = Fp8RmsPlacement::kEpilogue;
  bool gpu_numerics =
      false;  // the CPU FP8 reference with the GPU prefill path's roundings (--fp8-numerics gpu)
};

// The GPU engine's FP8 prefill path (gpu_engine/prefill.h) for prompt runs:
// auto: on when FP8 weights can be had (quantized on load from the model's
// weights, or stored in the .futr file); on: required (an error says why it
// cannot be); off: prompts run through the decode step.
enum class PrefillMode { kAuto, kOn, kOff };
std::string to_string(PrefillMode m);  // "auto" | "on" | "off"
PrefillMode parse_prefill_mode(const std::string& s);

// Calibration text for quantizers that need it (gptq*, clip-act, fp8's
// initial amax): the last 10% of the file's tokens, at most `tokens`.
struct CalibrationConfig {
  std::string file;  // "" = the default perplexity text (in the repository)
  int tokens = 16384;
  int ctx = 512;  // calibration window length
};

struct RuntimeConfig {
  EngineKind engine = EngineKind::kAuto;
  WeightFormat weights = WeightFormat::kAuto;
  // Quantizing on load (GGUF / Hugging Face models with weights fp8/int4/bf16).
  QuantMethod quant = QuantMethod::kRtn;
  bool quant_given = false;  // --quant / --act-order were given (refused for .futr files)
  bool act_order = false;
  int group = 0;  // INT4 group: 0 = 128, or 64 where K % 128 != 0
  bool lm_head_int4 =
      false;  // --head int4: the GPU engine's LM head quantized to INT4 (gpu::GpuEngineOptions)
  KvFormat kv = KvFormat::kAuto;
  int kv_block = 0;  // int4-rot Hadamard block; 0 = kDefaultKvBlock capped at head_dim
  int kv_block_size =
      0;  // paged KV cache: positions per block; 0: contiguous caches; -1: the engine's
          // default (kDefaultKvBlockSize, kDefaultGpuKvBlockSize; none with tensor parallelism)
  int64_t kv_blocks =
      0;  // paged: blocks in all; 0 = max_seqs x ceil(ctx / block), the contiguous caches' memory
  // GPU engine, paged: the share of the GPU's memory the engine may fill
  // (weights, workspaces and the cache), which sizes the cache when kv_blocks is 0; 0: not used.
  double gpu_memory_fraction = 0;
  int ctx = 0;                // positions per sequence; 0 = the model's trained context, capped
  int max_seqs = 1;           // sequences open at once (each gets ctx positions); 0: the engine's default
  int max_step_tokens = 256;  // rows per step() at most
  int threads = 0;            // CPU threads; 0 = the default (cpu_engine/threads.h)
  int tp = 1;  // GPUs the model is split over (tensor parallelism, gpu_engine/tp_engine.h); 1: none
  bool gpu_graphs =
      true;  // GPU engine: one CUDA graph per batch bucket (false: eager; FUTR_GPU_GRAPHS=0 too)
  PrefillMode prefill = PrefillMode::kAuto;  // GPU engine: the FP8 prefill path for prompts
  int prefill_rows =
      0;  // GPU engine: rows per prefill chunk (0: its default, 2048); capped at max_step_tokens
  bool gpu_pdl =
      true;  // GPU engine: programmatic dependent launch between the step's kernels (FUTR_GPU_PDL=0: off)
  Fp8Config fp8{};
  CalibrationConfig calib{};
};

}  // namespace futr::runtime
