// futr::Error and the checking helpers every host component uses.
//
// Every failure a user can cause (bad file, bad flag, unsupported shape) is an
// futr::Error with a message that names the input and the problem; the CLI
// prints it and exits with status 1. Programming errors use FUTR_ASSERT.
#pragma once

#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#include <sstream>
#else
#include <fmt/format.h>
#endif

namespace futr {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

#if defined(__CUDACC__)
// NOTE: nvcc's front end cannot compile fmt 9 in C++20 mode (consteval format
// strings), so CUDA translation units substitute plain "{}" placeholders in
// order with iostreams. Format specs ("{:.3f}") are for host code only.
namespace detail {
inline void format_rest(std::ostringstream& os, const char* f) { os << f; }
template <class T, class... Rest>
void format_rest(std::ostringstream& os, const char* f, T&& v, Rest&&... rest) {
  for (; *f; ++f) {
    if (f[0] == '{' && f[1] == '}') {
      os << v;
      return format_rest(os, f + 2, std::forward<Rest>(rest)...);
    }
    os << *f;
  }
}
}  // namespace detail
template <class... Args>
[[noreturn]] void fail(const char* f, Args&&... args) {
  std::ostringstream os;
  detail::format_rest(os, f, std::forward<Args>(args)...);
  throw Error(os.str());
}
#else
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}
#endif

}  // namespace futr

// FUTR_CHECK(cond, "fmt", args...): throw futr::Error with the message if cond is false.
#define FUTR_CHECK(cond, ...)               \
  do {                                      \
    if (!(cond)) ::futr::fail(__VA_ARGS__); \
  } while (0)

// FUTR_ASSERT(cond): an internal invariant; names the file and line.
#define FUTR_ASSERT(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) ::futr::fail("internal error: {} ({}:{})", #cond, __FILE__, __LINE__); \
  } while (0)
