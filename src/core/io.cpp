// Limited reads of input files and stdin: see io.h.
#include "core/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace futr {

namespace {

std::string kind_of_mode(mode_t m) {
  if (S_ISREG(m)) return "regular file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISFIFO(m)) return "FIFO";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  if (S_ISSOCK(m)) return "socket";
  return "other file";
}

}  // namespace

std::string human_bytes(uint64_t n) {
  for (const auto& [unit, shift] : {std::pair{"GiB", 30}, std::pair{"MiB", 20}}) {
    if (n < (1ull << shift)) continue;
    if (n % (1ull << shift) == 0) return fmt::format("{} {}", n >> shift, unit);
    return fmt::format("{:.1f} {}", double(n) / double(1ull << shift), unit);
  }
  return fmt::format("{} bytes", n);
}

std::string file_kind(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0) return kind_of_mode(st.st_mode);
  if (::lstat(p.c_str(), &st) == 0) return "symbolic link";  // dangling
  return "missing";
}

bool optional_regular_file(const std::filesystem::path& p, const std::string& what) {
  const std::string k = file_kind(p);
  if (k == "missing") return false;
  if (k == "symbolic link") fail("{}: is a dangling symbolic link ({})", p.string(), what);
  FUTR_CHECK(k == "regular file", "{}: is a {}, expected a regular file ({})", p.string(), k, what);
  return true;
}

void require_regular_file(const std::filesystem::path& p, const std::string& what) {
  FUTR_CHECK(optional_regular_file(p, what), "{}: no such file ({})", p.string(), what);
}

std::string read_file_limited(const std::filesystem::path& p, uint64_t max_bytes, const std::string& what) {
  require_regular_file(p, what);
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FUTR_CHECK(fd >= 0, "{}: cannot open: {}", p.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced since the check
    ::close(fd);
    fail("{}: is not a regular file ({})", p.string(), what);
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    fail("{}: {} bytes, more than the {} limit for {}", p.string(), uint64_t(st.st_size), human_bytes(max_bytes),
         what);
  }
  try {
    std::string s = read_fd_limited(fd, max_bytes, p.string());
    ::close(fd);
    return s;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::string read_fd_limited(int fd, uint64_t max_bytes, const std::string& source) {
  std::string out;
  constexpr size_t kChunk = 1 << 16;
  for (;;) {
    const size_t old = out.size();
    const uint64_t room = max_bytes - old;
    const size_t want = size_t(room < kChunk ? room + 1 : kChunk);  // +1: detect "more than the limit"
    out.resize(old + want);
    ssize_t got;
    do {
      got = ::read(fd, out.data() + old, want);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
      const int e = errno;
      fail("{}: read error: {}", source, std::strerror(e));
    }
    out.resize(old + size_t(got));
    if (got == 0) return out;
    FUTR_CHECK(out.size() <= max_bytes, "{}: more than the {} limit", source, human_bytes(max_bytes));
  }
}

}  // namespace futr
