// JSON documents read from files (config.json, tokenizer.json,
// tokenizer_config.json, generation_config.json, the .futr header): parsing
// with a nesting limit and range-checked access to numbers.
//
// nlohmann::json's parser keeps its own stack, but dump(), comparisons and our
// own tree walks recurse, so a document nested 100,000 deep would overflow the
// stack while the error message is being formatted. parse_json_document()
// refuses documents nested deeper than kMaxJsonDepth before nlohmann sees them
// (a linear pre-scan of the text that skips strings; it reports the byte
// offset). Every Llama checkpoint's JSON nests fewer than 8 levels.
//
// json_int() / json_uint() / json_float() convert a value that must be a
// number, refusing other types, non-integers where an integer is needed,
// values outside [lo, hi] and (floats) non-finite values; messages name the
// source and the key: "m.futr: config.hidden = 1e+300 is out of range (1..65536)".
// json_snippet() renders a value for a message, clipped and escaped.
//
// Tests: tests/core/json_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace futr {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; futr::Error "<source>: not valid JSON: ..." or "<source>: JSON
// nested deeper than 64 levels (at byte N)".
nlohmann::json parse_json_document(std::string_view text, const std::string& source,
                                   int max_depth = kMaxJsonDepth);

// The value as an integer in [lo, hi]; `what` names it ("m.futr: config.hidden").
int64_t json_int(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi);
uint64_t json_uint(const nlohmann::json& v, const std::string& what, uint64_t hi = UINT64_MAX);
// A finite number in [lo, hi].
double json_float(const nlohmann::json& v, const std::string& what, double lo, double hi);

// At most `max_chars` of the value's JSON text, escaped (core/text.h).
std::string json_snippet(const nlohmann::json& v, size_t max_chars = 100);

}  // namespace futr
