// Limited reads of input files and stdin: see io.h.
#include "core/io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
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
    fail("{}: {} bytes, more than the {} limit for {}", p.string(), uint64_t(st.st_size),
         human_bytes(max_bytes), what);
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

// ---------------------------------------------------------------------------
// TempOutput
// ---------------------------------------------------------------------------

namespace {

// The temporary being written, for the signal handler (async-signal-safe:
// a fixed buffer and an atomic flag).
char g_temp_path[PATH_MAX + 1];
std::atomic<bool> g_temp_live{false};
struct sigaction g_prev_int, g_prev_term;

extern "C" void remove_temp_on_signal(int sig) {
  if (g_temp_live.exchange(false)) ::unlink(g_temp_path);
  ::sigaction(sig, sig == SIGINT ? &g_prev_int : &g_prev_term, nullptr);
  ::raise(sig);
}

}  // namespace

TempOutput::TempOutput(const std::filesystem::path& final_path) : final_(final_path) {
  std::string name = final_path.string() + ".tmp.XXXXXX";
  FUTR_CHECK(name.size() <= PATH_MAX, "{}: the output path is too long", final_path.string());
  FUTR_CHECK(!g_temp_live.load(), "{}: another output is being written", final_path.string());
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open for writing: {}", name, std::strerror(errno));
  const mode_t mask = ::umask(0);  // as a file created by ofstream: 0666 less the umask, not mkstemp's 0600
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  tmp_ = name;
  std::memcpy(g_temp_path, name.c_str(), name.size() + 1);
  g_temp_live.store(true);
  struct sigaction sa {};
  sa.sa_handler = remove_temp_on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &g_prev_int);
  ::sigaction(SIGTERM, &sa, &g_prev_term);
}

TempOutput::~TempOutput() { discard(); }

void TempOutput::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (g_temp_live.exchange(false)) {
    ::unlink(tmp_.c_str());
    ::sigaction(SIGINT, &g_prev_int, nullptr);
    ::sigaction(SIGTERM, &g_prev_term, nullptr);
  }
}

void TempOutput::write(const void* data, size_t n) {
  FUTR_CHECK(fd_ >= 0, "{}: already closed", tmp_.string());
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("{}: write error: {}", tmp_.string(), w < 0 ? std::strerror(errno) : "no space");
    p += w;
    n -= size_t(w);
  }
}

void TempOutput::commit() {
  FUTR_CHECK(fd_ >= 0, "{}: already closed", tmp_.string());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int e = errno;
    discard();
    fail("{}: write error: {}", tmp_.string(), std::strerror(e));
  }
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    const int e = errno;
    discard();
    fail("{}: cannot rename {} into place: {}", final_.string(), tmp_.string(), std::strerror(e));
  }
  g_temp_live.store(false);
  ::sigaction(SIGINT, &g_prev_int, nullptr);
  ::sigaction(SIGTERM, &g_prev_term, nullptr);
}

}  // namespace futr
