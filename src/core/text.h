// printable(): the one escaping helper for text that came from a file or a
// user and goes into a message (errors, warnings, `futr info`).
//
// A hostile GGUF can name a tensor "\x1b]0;owned\x07" or carry terminal escape
// sequences in its metadata; printed raw they would drive the user's terminal.
// printable() keeps valid UTF-8 (so "Ġthe" or "±" read as they are) and writes
// every C0 control, DEL, C1 control (U+0080..U+009F, which some terminals treat
// as CSI) and every byte of invalid UTF-8 as \xNN. Newline and tab are kept
// only where `keep_newlines` says so (whole messages; not names).
// futr::fail() passes every error message through it, so no error path can
// print raw control bytes whatever it formats; readers also use it with
// `max_bytes` to clip long names.
//
// Header-only and free of fmt so that CUDA translation units can use it.
// Tests: tests/core/text_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace futr {

namespace detail {
// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if invalid.
inline size_t utf8_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  return n;
}
}  // namespace detail

// `s` with control bytes and invalid UTF-8 escaped as \xNN (see above); at most
// about `max_bytes` of the input are rendered, then "..." (SIZE_MAX: all).
inline std::string printable(std::string_view s, size_t max_bytes = SIZE_MAX, bool keep_newlines = false) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() < 256 ? s.size() : 256);
  auto esc = [&](uint8_t c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  size_t i = 0;
  for (; i < s.size() && i < max_bytes;) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && !(keep_newlines && (c == '\n' || c == '\t'))) || c == 0x7f) esc(c);
      else out += char(c);
      ++i;
      continue;
    }
    const size_t n = detail::utf8_len(s, i);
    if (n == 0 || (n == 2 && c == 0xc2 && uint8_t(s[i + 1]) < 0xa0)) {  // invalid, or a C1 control
      esc(c);
      ++i;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  if (i < s.size()) out += "...";
  return out;
}

}  // namespace futr
