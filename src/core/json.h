// JSON documents a file or a client controls (config.json, tokenizer.json,
// tokenizer_config.json, generation_config.json, model.safetensors.index.json,
// the .futr header, `futr serve`'s request bodies): the one parsing entry
// point, with a size cap, a nesting cap and duplicate keys refused, and
// range-checked access to numbers.
//
// parse_json_document() runs nlohmann's parser with a parser callback that
// refuses, at the byte where they appear, a container nested deeper than
// `max_depth` (nlohmann's parser keeps its own stack, but dump(), comparisons
// and our own tree walks recurse, so a document nested 100,000 deep would
// overflow the stack later) and a key that appears twice in one object (JSON
// leaves it undefined; nlohmann would keep the last silently). Text longer
// than `max_bytes` is refused before parsing. A document that is invalid and
// also nests too deep ("{{{{...") is reported as too deep (a bracket count
// outside strings, run only on the error path). Every Llama checkpoint's JSON
// nests fewer than 8 levels. Error messages never hold more than a short,
// escaped excerpt of the document.
//
// json_int() / json_uint() / json_float() convert a value that must be a
// number, refusing other types, non-integers where an integer is needed,
// values outside [lo, hi] and (floats) non-finite values; messages name the
// source and the key: "m.futr: config.hidden = 1e+300 is out of range (1..65536)".
// json_snippet() renders a value for a message: at most `max_chars`, at most
// a few levels deep, escaped; it never walks more of the value than it prints.
//
// Tests: tests/core/json_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace futr {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonBytes = size_t(256) << 20;  // the largest file cap (.futr header)

// Parses `text`; futr::Error "<source>: not valid JSON: ...", "<source>: JSON
// nested deeper than 64 levels (at byte N)", "<source>: duplicate key 'k' (at
// byte N)" or "<source>: N bytes of JSON, more than the limit of M".
nlohmann::json parse_json_document(std::string_view text, const std::string& source,
                                   int max_depth = kMaxJsonDepth, size_t max_bytes = kMaxJsonBytes);

// The value as an integer in [lo, hi]; `what` names it ("m.futr: config.hidden").
int64_t json_int(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi);
uint64_t json_uint(const nlohmann::json& v, const std::string& what, uint64_t hi = UINT64_MAX);
// A finite number in [lo, hi].
double json_float(const nlohmann::json& v, const std::string& what, double lo, double hi);

// At most about `max_chars` of the value's JSON text, escaped (core/text.h);
// containers deeper than 4 levels are shown as [...] / {...}.
std::string json_snippet(const nlohmann::json& v, size_t max_chars = 100);

}  // namespace futr
