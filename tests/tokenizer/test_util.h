// Helpers shared by the tokenizer tests: the GPT-2 byte-level alphabet written
// out from its definition (independently of src/tokenizer), a small synthetic
// vocabulary over it, error-message capture and printable escapes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/spec.h"

namespace futr::test {

// UTF-8 of one code point.
inline std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3f));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2 bytes_to_unicode: bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF keep their
// code point; the remaining 68 bytes get 256, 257, ... in increasing order.
inline std::string byte_char(uint8_t b) {
  auto kept = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
  };
  if (kept(b)) return utf8(b);
  uint32_t n = 0;
  for (int x = 0; x < b; ++x)
    if (!kept(x)) ++n;
  return utf8(256 + n);
}

// Raw bytes -> byte-level vocabulary text.
inline std::string byte_level(const std::string& raw) {
  std::string s;
  for (unsigned char c : raw) s += byte_char(c);
  return s;
}

// A vocabulary with one token per byte (id = byte value, unless `skip` names
// bytes to leave out), then one token per merge result, then `specials`
// ({text, type}). Merges are given as raw byte strings.
inline TokenizerSpec alphabet_spec(const std::vector<std::pair<std::string, std::string>>& merges = {},
                                   const std::string& pre = "gpt2",
                                   const std::vector<std::pair<std::string, int32_t>>& specials = {},
                                   const std::vector<int>& skip = {}) {
  TokenizerSpec s;
  s.pre = pre;
  for (int b = 0; b < 256; ++b) {
    bool skipped = false;
    for (int k : skip) skipped |= k == b;
    s.tokens.push_back(skipped ? "<unused" + std::to_string(b) + ">" : byte_char(uint8_t(b)));
    s.token_types.push_back(skipped ? 5 : 1);
  }
  for (const auto& [a, b] : merges) {
    s.merges.push_back(byte_level(a) + " " + byte_level(b));
    const std::string r = byte_level(a + b);
    bool have = false;
    for (const auto& t : s.tokens) have |= t == r;
    if (!have) {
      s.tokens.push_back(r);
      s.token_types.push_back(1);
    }
  }
  for (const auto& [text, type] : specials) {
    s.tokens.push_back(text);
    s.token_types.push_back(type);
  }
  return s;
}

// The message of the futr::Error that f throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const futr::Error& e) {
    return e.what();
  }
  return {};
}

// Printable form of bytes: printable ASCII as is, the rest as \xNN.
inline std::string escape(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace futr::test
