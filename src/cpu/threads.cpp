// OpenBLAS + OpenMP thread counts (see threads.h).
#include "cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <fmt/format.h>

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
  return fmt::format("OpenMP {} threads, each calling single-threaded OpenBLAS ({}; {} thread)",
                     omp_get_max_threads(), openblas_get_config(), openblas_get_num_threads());
}

}  // namespace futr::cpu
