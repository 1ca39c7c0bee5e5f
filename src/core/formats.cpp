// Names of the number formats (see formats.h).
#include "core/formats.h"

#include "core/error.h"

namespace futr {

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

WeightFormat parse_weight_format(const std::string& s) {
  for (WeightFormat f : {WeightFormat::kAuto, WeightFormat::kFp32, WeightFormat::kBf16,
                         WeightFormat::kFp8, WeightFormat::kInt4})
    if (s == to_string(f)) return f;
  fail("unknown weight format '{}' (choose auto, fp32, bf16, fp8, int4)", s);
}

KvFormat parse_kv_format(const std::string& s) {
  for (KvFormat f : {KvFormat::kAuto, KvFormat::kFp32, KvFormat::kBf16, KvFormat::kInt4,
                     KvFormat::kInt4Rot})
    if (s == to_string(f)) return f;
  fail("unknown KV format '{}' (choose auto, fp32, bf16, int4, int4-rot)", s);
}

}  // namespace futr
