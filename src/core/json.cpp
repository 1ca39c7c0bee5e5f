// JSON parsing with a nesting limit and checked numbers: see json.h.
#include "core/json.h"

#include <cmath>

#include "core/error.h"
#include "core/text.h"

namespace futr {

using nlohmann::json;

nlohmann::json parse_json_document(std::string_view text, const std::string& source, int max_depth) {
  // Pre-scan: bracket depth outside strings. Invalid documents may be
  // mis-scanned, but the parser rejects those anyway.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      FUTR_CHECK(++depth <= max_depth, "{}: JSON nested deeper than {} levels (at byte {})", source, max_depth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions for the position and reason.
    try {
      j = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", source, e.what());
    }
    fail("{}: not valid JSON", source);
  }
  return j;
}

std::string json_snippet(const json& v, size_t max_chars) {
  // NOTE: dump() recurses; documents come from parse_json_document (bounded depth).
  const std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return printable(s, max_chars);
}

int64_t json_int(const json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    FUTR_CHECK(hi >= 0 && u <= uint64_t(hi) && int64_t(u) >= lo, "{} = {} is out of range ({}..{})", what, u, lo,
               hi);
    return int64_t(u);
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    FUTR_CHECK(x >= lo && x <= hi, "{} = {} is out of range ({}..{})", what, x, lo, hi);
    return x;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    FUTR_CHECK(std::isfinite(d) && d == std::floor(d) && d >= double(lo) && d <= double(hi),
               "{} = {} is not an integer in range ({}..{})", what, json_snippet(v), lo, hi);
    return int64_t(d);
  }
  fail("{} must be an integer, found {}", what, json_snippet(v));
}

uint64_t json_uint(const json& v, const std::string& what, uint64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    FUTR_CHECK(u <= hi, "{} = {} is out of range (0..{})", what, u, hi);
    return u;
  }
  if (v.is_number_integer()) fail("{} = {} is out of range (0..{})", what, v.get<int64_t>(), hi);
  fail("{} must be a non-negative integer, found {}", what, json_snippet(v));
}

double json_float(const json& v, const std::string& what, double lo, double hi) {
  FUTR_CHECK(v.is_number(), "{} must be a number, found {}", what, json_snippet(v));
  const double d = v.get<double>();
  FUTR_CHECK(std::isfinite(d) && d >= lo && d <= hi, "{} = {} is out of range ({}..{})", what, json_snippet(v), lo,
             hi);
  return d;
}

}  // namespace futr
