// OpenBLAS + OpenMP thread counts (see threads.h).
#include "cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace {

// NOTE: libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, in its own ELF
// constructor, before main() and before any constructor of this program. By
// default its idle threads spin for a while after every parallel region. On
// a machine whose cores are shared (the 2-core development and CI machines)
// a spinning thread takes the core from the thread everyone is waiting for:
// measured under load, decode fell to 1.8 tokens/s (12.7 passive) and prompt
// processing to 26 tokens/s (131 passive). So every program linking the CPU
// backend defaults to the passive policy, set from .preinit_array, which runs
// before all shared-library constructors. A user's own OMP_WAIT_POLICY or
// GOMP_SPINCOUNT wins. OPENBLAS_NUM_THREADS=1 likewise keeps OpenBLAS from
// starting a thread pool it would never use (set_num_threads() says why).
// .preinit_array exists only in executables: futr_cpu must stay a static
// library.
void futr_cpu_preinit(int, char**, char**) {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    setenv("OMP_WAIT_POLICY", "passive", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
}
__attribute__((section(".preinit_array"), used)) void (*const futr_cpu_preinit_entry)(
    int, char**, char**) = &futr_cpu_preinit;

}  // namespace

namespace futr::cpu {

int set_num_threads(int n) {
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
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
      "OpenMP {} threads (wait policy {}), each calling single-threaded OpenBLAS ({}; {} thread)",
      omp_get_max_threads(), wait ? wait : "default", openblas_get_config(),
      openblas_get_num_threads());
}

}  // namespace futr::cpu
