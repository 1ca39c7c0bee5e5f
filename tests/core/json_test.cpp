// core/json.h: nesting limit before nlohmann sees the text (deep documents
// never reach a recursive code path), checked integers and floats.
#include "core/json.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

using namespace futr;
using nlohmann::json;

TEST(JsonDocument, DepthLimit) {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(parse_json_document(ok, "ok.json"));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  EXPECT_FUTR_ERROR(parse_json_document(deep, "deep.json"), "deep.json: JSON nested deeper than 64 levels (at byte 64)");
  // A million levels: refused quickly, no stack overflow.
  std::string huge(1 << 20, '{');
  EXPECT_FUTR_ERROR(parse_json_document(huge, "huge.json"), "nested deeper than 64");
  // Brackets inside strings do not count; escaped quotes do not end them.
  const std::string in_string = "{\"k\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}";
  EXPECT_EQ(parse_json_document(in_string, "s.json")["k"].get<std::string>().size(), 2001u);
}

TEST(JsonDocument, InvalidNamesSource) {
  EXPECT_FUTR_ERROR(parse_json_document("{\"a\": }", "bad.json"), "bad.json: not valid JSON");
  EXPECT_FUTR_ERROR(parse_json_document("", "empty.json"), "empty.json: not valid JSON");
}

TEST(JsonNumbers, IntegersInRange) {
  EXPECT_EQ(json_int(json(5), "f: k", 1, 10), 5);
  EXPECT_EQ(json_int(json(3.0), "f: k", 1, 10), 3);
  EXPECT_FUTR_ERROR(json_int(json(11), "f: k", 1, 10), "f: k = 11 is out of range (1..10)");
  EXPECT_FUTR_ERROR(json_int(json(-1), "f: k", 0, 10), "f: k = -1 is out of range (0..10)");
  EXPECT_FUTR_ERROR(json_int(json(1e300), "f: k", 0, INT32_MAX), "f: k = 1e+300 is not an integer in range");
  EXPECT_FUTR_ERROR(json_int(json(2.5), "f: k", 0, 10), "is not an integer");
  EXPECT_FUTR_ERROR(json_int(json((uint64_t(1) << 32) + 64), "f: k", 0, INT32_MAX), "= 4294967360 is out of range");
  EXPECT_FUTR_ERROR(json_int(json(UINT64_MAX), "f: k", 0, INT64_MAX), "is out of range");
  EXPECT_FUTR_ERROR(json_int(json("5"), "f: k", 0, 10), "f: k must be an integer, found \"5\"");
  EXPECT_EQ(json_uint(json(uint64_t(1) << 40), "f: o"), uint64_t(1) << 40);
  EXPECT_FUTR_ERROR(json_uint(json(-3), "f: o"), "f: o = -3 is out of range");
}

TEST(JsonNumbers, FloatsFinite) {
  EXPECT_EQ(json_float(json(0.5), "f: x", 0, 1), 0.5);
  EXPECT_FUTR_ERROR(json_float(json(1e300), "f: x", -3.4e38, 3.4e38), "f: x = 1e+300 is out of range");
  EXPECT_FUTR_ERROR(json_float(json(nullptr), "f: x", 0, 1), "f: x must be a number, found null");
}

TEST(JsonSnippet, ClipsAndEscapes) {
  EXPECT_EQ(json_snippet(json("a\x1b")), "\"a\\u001b\"");
  EXPECT_EQ(json_snippet(json("\xff")), "\"\xef\xbf\xbd\"");  // invalid UTF-8 replaced, not a throw
  EXPECT_EQ(json_snippet(json(std::string(500, 'x')), 10), "\"xxxxxxxxx...");
}
