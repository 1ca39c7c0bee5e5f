// Spellings of the runtime's own choices (see config.h); those of the formats,
// the INT4 quantizer and the FP8 policy are in core/number_formats.cpp.
#include "runtime/config.h"

#include "core/enum_names.h"

namespace futr::runtime {

namespace {

constexpr auto kEngines = {EngineKind::kAuto, EngineKind::kCpu, EngineKind::kGpu};
constexpr auto kRms = {Fp8RmsPlacement::kEpilogue, Fp8RmsPlacement::kCast};
constexpr auto kPrefill = {PrefillMode::kAuto, PrefillMode::kOn, PrefillMode::kOff};

}  // namespace

std::string to_string(EngineKind k) {
  switch (k) {
    case EngineKind::kAuto: return "auto";
    case EngineKind::kCpu: return "cpu";
    case EngineKind::kGpu: return "gpu";
  }
  return "?";
}

std::string to_string(Fp8RmsPlacement p) { return p == Fp8RmsPlacement::kEpilogue ? "epilogue" : "cast"; }

std::string to_string(PrefillMode m) {
  switch (m) {
    case PrefillMode::kAuto: return "auto";
    case PrefillMode::kOn: return "on";
    case PrefillMode::kOff: return "off";
  }
  return "?";
}

PrefillMode parse_prefill_mode(const std::string& s) { return parse_enum(s, kPrefill, "prefill mode"); }

EngineKind parse_engine_kind(const std::string& s) { return parse_enum(s, kEngines, "engine"); }

Fp8RmsPlacement parse_fp8_rms(const std::string& s) { return parse_enum(s, kRms, "FP8 RMSNorm placement"); }

std::vector<std::string> engine_kind_names() { return enum_names(kEngines); }
std::vector<std::string> fp8_rms_names() { return enum_names(kRms); }

}  // namespace futr::runtime
