// The number formats a model runs in, one home each: how the seven
// projections of every layer are stored and run (WeightFormat) and how the KV
// cache is stored (KvFormat). quant/ (quantizers, .futr), cpu/ (the CPU
// engines), cuda/ and gpu/ (the kernels and the GPU engine) and runtime/ (the
// typed RuntimeConfig, which re-exports them) all use these two enums; no
// other file defines a format enum.
//
// kAuto is a request ("resolve it for me"), valid only in a RuntimeConfig;
// make_engine() resolves it and everything below the runtime sees a concrete
// format (a kAuto there is an error).
#pragma once

#include <string>

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

std::string to_string(WeightFormat f);  // "auto" | "fp32" | "bf16" | "fp8" | "int4"
std::string to_string(KvFormat f);      // "auto" | "fp32" | "bf16" | "int4" | "int4-rot"
// The spellings above (also "auto"); futr::Error naming the accepted values.
WeightFormat parse_weight_format(const std::string& s);
KvFormat parse_kv_format(const std::string& s);

}  // namespace futr
