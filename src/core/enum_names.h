// Spelling helpers for enums with a to_string(): the accepted names of a list
// of values, and the parse that fails naming them (core/number_formats.cpp,
// runtime/config.cpp).
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace futr {

// to_string() of each value, in order.
template <class E>
std::vector<std::string> enum_names(std::initializer_list<E> all) {
  std::vector<std::string> names;
  for (E e : all) names.push_back(to_string(e));
  return names;
}

// The value whose to_string() is `s`; else futr::Error "unknown <what> '<s>' (choose a, b, c)".
template <class E>
E parse_enum(const std::string& s, std::initializer_list<E> all, const char* what) {
  for (E e : all)
    if (to_string(e) == s) return e;
  fail("unknown {} '{}' (choose {})", what, s, fmt::join(enum_names(all), ", "));
}

}  // namespace futr
