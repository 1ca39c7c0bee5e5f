// Spellings of the runtime's choices (see config.h).
#include "runtime/config.h"

#include <fmt/format.h>

#include "core/error.h"

namespace futr::runtime {

namespace {

// The value of `E` whose to_string() is `s`, else futr::Error naming `what` and the choices.
template <class E>
E parse_enum(const std::string& s, std::initializer_list<E> all, const char* what) {
  std::vector<std::string> names;
  for (E e : all) {
    if (to_string(e) == s) return e;
    names.push_back(to_string(e));
  }
  fail("unknown {} '{}' (choose {})", what, s, fmt::join(names, ", "));
}

template <class E>
std::vector<std::string> names_of(std::initializer_list<E> all) {
  std::vector<std::string> names;
  for (E e : all) names.push_back(to_string(e));
  return names;
}

constexpr auto kEngines = {EngineKind::kAuto, EngineKind::kCpu, EngineKind::kGpu};
constexpr auto kMethods = {QuantMethod::kRtn, QuantMethod::kClip, QuantMethod::kClipAct,
                           QuantMethod::kGptq, QuantMethod::kGptqClip};
constexpr auto kWeights = {WeightFormat::kAuto, WeightFormat::kFp32, WeightFormat::kBf16,
                           WeightFormat::kFp8, WeightFormat::kInt4};
constexpr auto kKv = {KvFormat::kAuto, KvFormat::kFp32, KvFormat::kBf16, KvFormat::kInt4,
                      KvFormat::kInt4Rot};

}  // namespace

std::string to_string(EngineKind k) {
  switch (k) {
    case EngineKind::kAuto: return "auto";
    case EngineKind::kCpu: return "cpu";
    case EngineKind::kGpu: return "gpu";
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
  return p == Fp8SaturationPolicy::kClamp ? "clamp" : "recompute";
}

std::string to_string(Fp8RmsPlacement p) {
  return p == Fp8RmsPlacement::kEpilogue ? "epilogue" : "cast";
}

EngineKind parse_engine_kind(const std::string& s) { return parse_enum(s, kEngines, "engine"); }

QuantMethod parse_quant_method(const std::string& s) {
  return parse_enum(s, kMethods, "INT4 quantizer");
}

Fp8SaturationPolicy parse_fp8_policy(const std::string& s) {
  return parse_enum(s, {Fp8SaturationPolicy::kClamp, Fp8SaturationPolicy::kRecompute},
                    "FP8 saturation policy");
}

Fp8RmsPlacement parse_fp8_rms(const std::string& s) {
  return parse_enum(s, {Fp8RmsPlacement::kEpilogue, Fp8RmsPlacement::kCast},
                    "FP8 RMSNorm placement");
}

std::vector<std::string> engine_kind_names() { return names_of(kEngines); }
std::vector<std::string> weight_format_names() { return names_of(kWeights); }
std::vector<std::string> kv_format_names() { return names_of(kKv); }
std::vector<std::string> quant_method_names() { return names_of(kMethods); }

}  // namespace futr::runtime
