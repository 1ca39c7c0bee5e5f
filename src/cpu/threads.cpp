// OpenBLAS + OpenMP thread counts (see threads.h).
#include "cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace futr::cpu {

int set_num_threads(int n) {
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

std::string threading_info() {
  return fmt::format("OpenBLAS {} threads ({}), OpenMP {} threads", openblas_get_num_threads(),
                     openblas_get_config(), omp_get_max_threads());
}

}  // namespace futr::cpu
