// Names of the number formats and quantization choices (see formats.h).
#include "core/number_formats.h"

#include "core/enum_names.h"

namespace futr {

namespace {

constexpr auto kWeights = {WeightFormat::kAuto, WeightFormat::kFp32, WeightFormat::kBf16, WeightFormat::kFp8,
                           WeightFormat::kInt4};
constexpr auto kKv = {KvFormat::kAuto, KvFormat::kFp32, KvFormat::kBf16, KvFormat::kInt4, KvFormat::kInt4Rot};
constexpr auto kMethods = {QuantMethod::kRtn, QuantMethod::kClip, QuantMethod::kClipAct, QuantMethod::kGptq,
                           QuantMethod::kGptqClip};
constexpr auto kPolicies = {Fp8SaturationPolicy::kClampRescale, Fp8SaturationPolicy::kRecompute};
constexpr auto kScalings = {Fp8Scaling::kStatic, Fp8Scaling::kDelayed};

}  // namespace

std::string to_string(WeightFormat f) {
  switch (f) {
    case WeightFormat::kAuto: return "auto";
    case WeightFormat::kFp32: return "fp32";
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kFp8: return "fp8";
    case WeightFormat::kInt4: return "int4";
  }
  return "?";
}

std::string to_string(KvFormat f) {
  switch (f) {
    case KvFormat::kAuto: return "auto";
    case KvFormat::kFp32: return "fp32";
    case KvFormat::kBf16: return "bf16";
    case KvFormat::kInt4: return "int4";
    case KvFormat::kInt4Rot: return "int4-rot";
  }
  return "?";
}

std::string to_string(QuantMethod m) {
  switch (m) {
    case QuantMethod::kRtn: return "rtn";
    case QuantMethod::kClip: return "clip";
    case QuantMethod::kClipAct: return "clip-act";
    case QuantMethod::kGptq: return "gptq";
    case QuantMethod::kGptqClip: return "gptq-clip";
  }
  return "?";
}

std::string to_string(Fp8SaturationPolicy p) {
  switch (p) {
    case Fp8SaturationPolicy::kClampRescale: return "clamp";
    case Fp8SaturationPolicy::kRecompute: return "recompute";
  }
  return "?";
}

std::string to_string(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::kStatic: return "static";
    case Fp8Scaling::kDelayed: return "delayed";
  }
  return "?";
}

WeightFormat parse_weight_format(const std::string& s) { return parse_enum(s, kWeights, "weight format"); }
KvFormat parse_kv_format(const std::string& s) { return parse_enum(s, kKv, "KV format"); }
QuantMethod parse_quant_method(const std::string& s) { return parse_enum(s, kMethods, "INT4 quantizer"); }
Fp8SaturationPolicy parse_fp8_policy(const std::string& s) {
  return parse_enum(s, kPolicies, "FP8 saturation policy");
}

std::vector<std::string> weight_format_names() { return enum_names(kWeights); }
std::vector<std::string> kv_format_names() { return enum_names(kKv); }
std::vector<std::string> quant_method_names() { return enum_names(kMethods); }
std::vector<std::string> fp8_policy_names() { return enum_names(kPolicies); }
std::vector<std::string> fp8_scaling_names() { return enum_names(kScalings); }
Fp8Scaling parse_fp8_scaling(const std::string& s) { return parse_enum(s, kScalings, "FP8 scaling"); }

bool is_gptq(QuantMethod m) { return m == QuantMethod::kGptq || m == QuantMethod::kGptqClip; }

bool needs_activations(QuantMethod m) { return is_gptq(m) || m == QuantMethod::kClipAct; }

std::string quant_method_label(QuantMethod m, bool act_order) {
  std::string s;
  switch (m) {
    case QuantMethod::kRtn: s = "rtn"; break;
    case QuantMethod::kClip: s = "rtn+clip"; break;
    case QuantMethod::kClipAct: s = "rtn+clip(act)"; break;
    case QuantMethod::kGptq: s = "gptq"; break;
    case QuantMethod::kGptqClip: s = "gptq+clip"; break;
  }
  if (act_order && is_gptq(m)) s += ",act-order";
  return s;
}

}  // namespace futr
