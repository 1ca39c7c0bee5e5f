// The number formats a model runs in and the choices that produce them, one
// home each: how the seven projections of every layer are stored and run
// (WeightFormat), how the KV cache is stored (KvFormat), which INT4 quantizer
// made the weights (QuantMethod) and what an FP8 activation does when it
// saturates (Fp8SaturationPolicy). quant/ (quantizers, delayed scaling,
// .futr), cpu_engine/ (the CPU engines), launch/ and gpu_engine/ (the kernel
// launchers and the GPU engine) and runtime/ (the typed RuntimeConfig, which
// re-exports them) all use these enums; no other file defines them or spells
// their names.
//
// kAuto is a request ("resolve it for me"), valid only in a RuntimeConfig;
// make_engine() resolves it and everything below the runtime sees a concrete
// format (a kAuto there is an error).
//
// Each enum has to_string() (its one spelling, used by the CLI, logs and the
// .futr metadata), parse_*() (the inverse; futr::Error naming the accepted
// values otherwise) and *_names() (the accepted spellings, for help texts and
// CLI checks). Tests: tests/core/number_formats_test.cpp.
#pragma once

#include <string>
#include <vector>

namespace futr {

enum class WeightFormat {
  kAuto,  // fp32 for an unquantized model, the file's own format for a .futr file
  kFp32,  // the FP32 reference (not a quantized format)
  kBf16,  // BF16 weights, BF16 activations: the baseline
  kFp8,   // E4M3 per-channel weights, E4M3 delayed-scaled activations (prefill)
  kInt4,  // INT4 group-scaled weights, BF16 activations (decode)
};

enum class KvFormat {
  kAuto,     // fp32 with fp32 weights, else bf16
  kFp32,     // FP32 rows (the reference)
  kBf16,     // the BF16 primary cache
  kInt4,     // the INT4 mirror (quant/kv_int4.h): amax/7 per token and KV head
  kInt4Rot,  // the INT4 mirror of rows rotated by the block Walsh-Hadamard transform
};

// The INT4 weight quantizer (quant/int4_quant.h, quant/gptq.h; run by
// cpu::quantize_model, chosen by --quant).
enum class QuantMethod {
  kRtn,       // round to nearest, group scales from the group's amax
  kClip,      // RTN + a clipping search on the weight MSE
  kClipAct,   // RTN + the search weighted per input by E[x_k^2] of calibration activations
  kGptq,      // GPTQ on the calibration activations' Hessian
  kGptqClip,  // GPTQ whose group scales come from the search weighted by H_kk
};

// What a delayed-scaled FP8 activation does when a call saturates
// (quant/delayed_scaling.h has the state machine; chosen by --fp8-policy).
enum class Fp8SaturationPolicy {
  kClampRescale,  // "clamp": values clamped to +-448 s, the next call's scale covers them (graph friendly)
  kRecompute,     // "recompute": the call is re-run at once with the new scale (host sync)
};

// How FP8 activation scales are chosen (--fp8-scaling; quant/delayed_scaling.h).
enum class Fp8Scaling {
  kStatic,   // "static": one scale per site, calibrated once, never changed by any call (the default:
             // a request's numbers depend on nothing another request does)
  kDelayed,  // "delayed": the paper's delayed scaling, its amax history per request
};

std::string to_string(WeightFormat f);         // "auto" | "fp32" | "bf16" | "fp8" | "int4"
std::string to_string(KvFormat f);             // "auto" | "fp32" | "bf16" | "int4" | "int4-rot"
std::string to_string(QuantMethod m);          // "rtn" | "clip" | "clip-act" | "gptq" | "gptq-clip"
std::string to_string(Fp8SaturationPolicy p);  // "clamp" | "recompute"
std::string to_string(Fp8Scaling s);           // "static" | "delayed"
// The spellings above; futr::Error naming what was parsed and the accepted values.
WeightFormat parse_weight_format(const std::string& s);
KvFormat parse_kv_format(const std::string& s);
QuantMethod parse_quant_method(const std::string& s);
Fp8SaturationPolicy parse_fp8_policy(const std::string& s);
Fp8Scaling parse_fp8_scaling(const std::string& s);
// The accepted spellings, in declaration order ({"rtn", "clip", ...}).
std::vector<std::string> weight_format_names();
std::vector<std::string> kv_format_names();
std::vector<std::string> quant_method_names();
std::vector<std::string> fp8_policy_names();
std::vector<std::string> fp8_scaling_names();

// Properties of a quantizer.
bool is_gptq(QuantMethod m);            // gptq, gptq-clip
bool needs_activations(QuantMethod m);  // calibration activations needed: clip-act, gptq, gptq-clip
// How a tensor made by `m` is described in .futr metadata and logs (what was
// done, not the flag): "rtn", "rtn+clip", "rtn+clip(act)", "gptq",
// "gptq+clip", plus ",act-order" for GPTQ with act_order.
std::string quant_method_label(QuantMethod m, bool act_order);

}  // namespace futr
