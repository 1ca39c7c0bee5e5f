// core/json.h: the JSON entry point's limits (nesting, size, duplicate keys,
// short messages), checked integers and floats, bounded snippets.
#include "core/json.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

using namespace futr;
using nlohmann::json;

TEST(JsonDocument, DepthLimit) {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(parse_json_document(ok, "ok.json"));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  EXPECT_FUTR_ERROR(parse_json_document(deep, "deep.json"),
                    "deep.json: JSON nested deeper than 64 levels (at byte 64)");
  // A million levels: refused quickly, no stack overflow.
  std::string huge(1 << 20, '{');
  EXPECT_FUTR_ERROR(parse_json_document(huge, "huge.json"), "nested deeper than 64");
  // Brackets inside strings do not count; escaped quotes do not end them.
  const std::string in_string =
      "{\"k\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}";
  EXPECT_EQ(parse_json_document(in_string, "s.json")["k"].get<std::string>().size(), 2001u);
}

TEST(JsonDocument, InvalidNamesSource) {
  EXPECT_FUTR_ERROR(parse_json_document("{\"a\": }", "bad.json"), "bad.json: not valid JSON");
  EXPECT_FUTR_ERROR(parse_json_document("", "empty.json"), "empty.json: not valid JSON");
}

// Duplicate keys are refused with the key named (nlohmann would keep the last
// silently); the same key in two objects is fine.
TEST(JsonDocument, DuplicateKeysRefused) {
  EXPECT_FUTR_ERROR(parse_json_document(R"({"a": 1, "b": 2, "a": 3})", "d.json"),
                    "d.json: duplicate key 'a'");
  EXPECT_FUTR_ERROR(parse_json_document(R"({"x": [{"k": 1}, {"k": 2, "k": 2}]})", "d.json"),
                    "duplicate key 'k'");
  const json ok = parse_json_document(R"({"k": {"k": 1}, "l": [{"k": 1}, {"k": 2}]})", "ok.json");
  EXPECT_EQ(ok["l"][1]["k"], 2);
  // The echo of a long key is clipped.
  const std::string big(100000, 'q');
  try {
    parse_json_document("{\"" + big + "\": 1, \"" + big + "\": 2}", "d.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u);
  }
}

// A size cap before parsing; parse errors quote at most a short excerpt.
TEST(JsonDocument, SizeCapAndShortMessages) {
  EXPECT_FUTR_ERROR(parse_json_document(std::string(101, ' '), "s.json", kMaxJsonDepth, 100),
                    "s.json: 101 bytes of JSON, more than the limit of 100");
  EXPECT_NO_THROW(parse_json_document("[" + std::string(98, ' ') + "]", "s.json", kMaxJsonDepth, 100));
  const std::string bad = "[\"" + std::string(1 << 20, 'x') + "\x01\"]";
  try {
    parse_json_document(bad, "b.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_NE(std::string(e.what()).find("b.json: not valid JSON"), std::string::npos);
  }
}

// Nested arrays and objects mixed: the cap counts both; a custom cap holds.
TEST(JsonDocument, DepthCapCountsObjectsAndArrays) {
  std::string mixed;
  for (int i = 0; i < 40; ++i) mixed += "{\"a\":[";
  EXPECT_FUTR_ERROR(parse_json_document(mixed, "m.json"), "m.json: JSON nested deeper than 64 levels");
  EXPECT_FUTR_ERROR(parse_json_document("[[[1]]]", "c.json", 2),
                    "c.json: JSON nested deeper than 2 levels (at byte 2)");
  EXPECT_NO_THROW(parse_json_document("[[1]]", "c.json", 2));
}

TEST(JsonNumbers, IntegersInRange) {
  EXPECT_EQ(json_int(json(5), "f: k", 1, 10), 5);
  EXPECT_EQ(json_int(json(3.0), "f: k", 1, 10), 3);
  EXPECT_FUTR_ERROR(json_int(json(11), "f: k", 1, 10), "f: k = 11 is out of range (1..10)");
  EXPECT_FUTR_ERROR(json_int(json(-1), "f: k", 0, 10), "f: k = -1 is out of range (0..10)");
  EXPECT_FUTR_ERROR(json_int(json(1e300), "f: k", 0, INT32_MAX), "f: k = 1e+300 is not an integer in range");
  EXPECT_FUTR_ERROR(json_int(json(2.5), "f: k", 0, 10), "is not an integer");
  EXPECT_FUTR_ERROR(json_int(json((uint64_t(1) << 32) + 64), "f: k", 0, INT32_MAX),
                    "= 4294967360 is out of range");
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
  EXPECT_EQ(json_snippet(json::parse(R"({"a":[1,2]})")), R"({"a":[1,2]})");
}

// A value nested 60 levels deep or with a million elements: the snippet
// walks only what it prints (bounded depth, bounded length).
TEST(JsonSnippet, BoundedForDeepAndWideValues) {
  json deep = 1;
  for (int i = 0; i < 60; ++i) deep = json::array({deep});
  EXPECT_EQ(json_snippet(deep), "[[[[[...]]]]]");
  json wide = json::array();
  for (int i = 0; i < 1000000; ++i) wide.push_back(i);
  const std::string s = json_snippet(wide, 20);
  EXPECT_LE(s.size(), 24u);
  EXPECT_EQ(s.rfind("[0,1,2,", 0), 0u);
}
