// JSON parsing with size, nesting and duplicate-key limits, and checked
// numbers: see json.h.
#include "core/json.h"

#include <cmath>
#include <iterator>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace futr {

using nlohmann::json;

namespace {

// A pointer into the text that records how far the parser has read, so the
// parser callback can name the byte of an error (nlohmann's lexer reads one
// character at a time through it, without look-ahead past a bracket).
struct TrackedChars {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char** read_to = nullptr;
  reference operator*() const { return *p; }
  TrackedChars& operator++() {
    *read_to = ++p;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars t = *this;
    ++*this;
    return t;
  }
  bool operator==(const TrackedChars& o) const { return p == o.p; }
  bool operator!=(const TrackedChars& o) const { return p != o.p; }
};

void check_bracket_depth(std::string_view text, const std::string& source, int max_depth) {
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
      FUTR_CHECK(++depth <= max_depth, "{}: JSON nested deeper than {} levels (at byte {})", source,
                 max_depth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json_document(std::string_view text, const std::string& source, int max_depth,
                                   size_t max_bytes) {
  FUTR_CHECK(text.size() <= max_bytes, "{}: {} bytes of JSON, more than the limit of {}", source, text.size(),
             max_bytes);
  const char* read_to = text.data();
  auto at = [&] { return size_t(read_to - text.data()) - 1; };  // the byte just read
  std::vector<std::unordered_set<std::string>> keys;            // per open object
  std::vector<bool> is_object;                                  // per open container
  const json::parser_callback_t check = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        FUTR_CHECK(int(is_object.size()) < max_depth, "{}: JSON nested deeper than {} levels (at byte {})",
                   source, max_depth, at());
        is_object.push_back(event == json::parse_event_t::object_start);
        if (is_object.back()) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!is_object.empty()) {
          if (is_object.back()) keys.pop_back();
          is_object.pop_back();
        }
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        FUTR_CHECK(keys.empty() || keys.back().insert(k).second, "{}: duplicate key '{}' (at byte {})",
                   source, printable(k, 64), at());
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  const TrackedChars begin{text.data(), &read_to}, end{text.data() + text.size(), &read_to};
  json j;
  try {
    j = json::parse(begin, end, check);
  } catch (const json::exception& e) {
    // An invalid document that also nests too deep ("{{{{...") is reported as
    // too deep, at the byte a bracket count outside strings finds.
    check_bracket_depth(text, source, max_depth);
    // nlohmann's message quotes the last token read, which may be long.
    fail("{}: not valid JSON: {}", source, printable(e.what(), 200));
  }
  return j;
}

namespace {

void snippet(const json& v, int depth, size_t budget, std::string& out) {
  auto dump = [&](const json& x) { out += x.dump(-1, ' ', false, json::error_handler_t::replace); };
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    dump(s.size() > budget ? json(s.substr(0, budget + 1)) : v);
    return;
  }
  if (!v.is_structured()) {
    dump(v);
    return;
  }
  const bool obj = v.is_object();
  if (depth >= 4 && !v.empty()) {
    out += obj ? "{...}" : "[...]";
    return;
  }
  out += obj ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (out.size() > budget) return;  // clipped by the caller
    if (!first) out += ',';
    first = false;
    if (obj) {
      snippet(json(it.key().substr(0, budget + 1)), depth + 1, budget, out);
      out += ':';
    }
    snippet(*it, depth + 1, budget, out);
  }
  out += obj ? '}' : ']';
}

}  // namespace

std::string json_snippet(const json& v, size_t max_chars) {
  std::string s;
  snippet(v, 0, max_chars, s);
  return printable(s, max_chars);
}

int64_t json_int(const json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    FUTR_CHECK(hi >= 0 && u <= uint64_t(hi) && int64_t(u) >= lo, "{} = {} is out of range ({}..{})", what, u,
               lo, hi);
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
  FUTR_CHECK(std::isfinite(d) && d >= lo && d <= hi, "{} = {} is out of range ({}..{})", what,
             json_snippet(v), lo, hi);
  return d;
}

}  // namespace futr
