// OpenBLAS + OpenMP thread counts (see threads.h).
#include "cpu_engine/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace {

// NOTE: libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, in its own ELF
// constructor, before main() and before any constructor of this program. By
// default its idle threads spin for a while after every parallel region. On
// a machine whose cores are shared (a 2-core CI machine running several jobs)
// a spinning thread takes the core from the thread everyone is waiting for:
// measured under load, decode fell to 1.8 tokens/s (12.7 passive) and prompt
// processing to 26 tokens/s (131 passive). So every program linking the CPU
// backend defaults to the passive policy, set from .preinit_array, which runs
// before all shared-library constructors. A user's own OMP_WAIT_POLICY or
// GOMP_SPINCOUNT wins. OPENBLAS_NUM_THREADS=1 likewise keeps OpenBLAS from
// starting a thread pool it would never use (set_num_threads() says why).
// .preinit_array exists only in executables: futr_cpu_engine must stay a static
// library.
void futr_cpu_preinit(int, char**, char**) {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    setenv("OMP_WAIT_POLICY", "passive", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
}
__attribute__((section(".preinit_array"),
               used)) void (*const futr_cpu_preinit_entry)(int, char**, char**) = &futr_cpu_preinit;

}  // namespace

namespace futr::cpu {

int logical_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int physical_cores() {
  static const int cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return logical_cpus();
    std::set<std::pair<long, long>> seen;  // (physical_package_id, core_id)
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      const std::string dir = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", c);
      long pkg = -1, core = -1;
      std::ifstream(dir + "physical_package_id") >> pkg;
      std::ifstream(dir + "core_id") >> core;
      if (pkg < 0 || core < 0) return logical_cpus();  // no topology (some containers)
      seen.insert({pkg, core});
    }
    return std::max(1, int(seen.size()));
  }();
  return cores;
}

std::string oversubscription_warning(int n) {
  const int cores = physical_cores();
  if (n <= cores) return {};
  return fmt::format(
      "futr: warning: {} threads on {} physical core{} ({} logical CPUs available): the extra threads "
      "share cores and usually make it slower; the default is {} (-t {})",
      n, cores, cores == 1 ? "" : "s", logical_cpus(), idle_default_threads(), idle_default_threads());
}

std::string contention_warning(int threads, int logical, double load1) {
  if (threads <= 0 || logical <= 0 || !(load1 >= 0.75) || double(threads) + load1 <= double(logical) + 0.5)
    return {};
  const int fits = std::max(1, logical - int(load1 + 0.5));
  if (fits >= threads) return {};
  return fmt::format(
      "futr: warning: the CPUs are busy (load average {:.1f} on {} logical CPU{}): {} threads will wait for "
      "each other; -t {} (--threads) is likely faster",
      load1, logical, logical == 1 ? "" : "s", threads, fits);
}

std::string contention_warning(int threads) {
  double load[1] = {0};
  if (getloadavg(load, 1) != 1) return {};
  return contention_warning(threads, logical_cpus(), load[0]);
}

int default_threads(int physical, int logical, double load1) {
  int n = physical > 4 ? physical - 1 : physical;
  if (load1 >= 0 && logical > 0) n = std::min(n, logical - int(load1 + 0.5));
  return std::max(1, n);
}

int idle_default_threads() { return default_threads(physical_cores(), logical_cpus(), -1.0); }

int omp_num_threads_value(const char* value) {
  if (!value) return 0;
  const std::string_view v(value);
  const std::string_view first = v.substr(0, v.find(','));
  int n = 0;
  const auto [end, ec] = std::from_chars(first.data(), first.data() + first.size(), n);
  return ec == std::errc() && end == first.data() + first.size() && n >= 1 ? n : 0;
}

int omp_num_threads_env() { return omp_num_threads_value(std::getenv("OMP_NUM_THREADS")); }

int default_threads() {
  static const int n = [] {
    double load[1] = {-1.0};
    if (getloadavg(load, 1) != 1) load[0] = -1.0;
    const int d = default_threads(physical_cores(), logical_cpus(), load[0]);
    const int env = omp_num_threads_env();
    return env > 0 ? std::min(d, env) : d;
  }();
  return n;
}

std::string ContentionWatch::observe(double seconds, int logical, double load1) {
  if (warned_ || !(seconds >= 0)) return {};
  const int have = std::min(seen_, kWindow);
  std::string out;
  if (have >= kMinSteps) {
    double sorted[kWindow];
    std::copy(recent_, recent_ + have, sorted);
    std::nth_element(sorted, sorted + have / 2, sorted + have);
    const double median = sorted[have / 2];
    if (seconds > kSlowdown * median && load1 >= 0 && double(threads_) + load1 > double(logical) + 0.5) {
      warned_ = true;
      const int fits = std::max(1, logical - int(load1 + 0.5));
      out = fmt::format(
          "futr: warning: decode steps slowed from {:.1f} ms to {:.1f} ms: other processes keep the CPUs "
          "busy "
          "(load average {:.1f} on {} logical CPU{}){}",
          1e3 * median, 1e3 * seconds, load1, logical, logical == 1 ? "" : "s",
          fits < threads_ ? fmt::format("; -t {} (--threads) is likely faster than {}", fits, threads_) : "");
    }
  }
  recent_[seen_ % kWindow] = seconds;
  ++seen_;
  return out;
}

std::string ContentionWatch::observe(double seconds) {
  double load[1] = {-1.0};
  if (getloadavg(load, 1) != 1) load[0] = -1.0;
  return observe(seconds, logical_cpus(), load[0]);
}

int set_num_threads(int n) {
  if (n <= 0) n = default_threads();
  if (const std::string w = oversubscription_warning(n); !w.empty()) {
    static std::mutex mu;
    static std::set<int> warned;
    const std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(n).second) std::fprintf(stderr, "%s\n", w.c_str());
  }
  openblas_set_num_threads(1);  // OpenBLAS runs inside the OpenMP threads
  omp_set_num_threads(n);
  return n;
}

void ensure_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

int num_threads() { return omp_get_max_threads(); }

std::string threading_info() {
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  return fmt::format(
      "OpenMP {} threads on {} physical cores (wait policy {}), each calling single-threaded OpenBLAS "
      "({}; {} thread)",
      omp_get_max_threads(), physical_cores(), wait ? wait : "default", openblas_get_config(),
      openblas_get_num_threads());
}

}  // namespace futr::cpu
