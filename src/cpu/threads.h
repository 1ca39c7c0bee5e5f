// Thread control of the CPU reference backend.
//
// One thread pool: OpenMP. Every parallel step (GEMM column slices in
// cpu/linear.cpp, attention tasks and elementwise loops in cpu/ops.cpp) is an
// OpenMP region, and OpenBLAS is called single-threaded from inside it.
//
// NOTE: the first version let OpenBLAS (pthreads build) run its own threads
// for GEMMs beside OpenMP for the rest. On the 2-core machine the two pools
// spin-wait against each other after every region: decode ran at 9 tokens/s
// with 2 threads against 25 with 1 (and 44 with GOMP_SPINCOUNT=0). With one
// pool there is nothing to compete with (docs/CPU_BACKEND.md).
//
// Every program linking futr_cpu starts with OMP_WAIT_POLICY=passive unless
// the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (threads.cpp says why and
// how); on a dedicated machine OMP_WAIT_POLICY=active may be a little faster.
#pragma once

#include <string>

namespace futr::cpu {

// Uses n OpenMP threads (n <= 0: all hardware threads) and sets OpenBLAS to
// one thread. Returns the count in use.
int set_num_threads(int n);
// Sets OpenBLAS to one thread once per process (called by every BLAS user in
// futr_cpu, so a program that never calls set_num_threads() is still right).
void ensure_single_threaded_blas();
// Threads OpenMP regions use.
int num_threads();
// A line for reports: OpenMP threads and the OpenBLAS build.
std::string threading_info();

}  // namespace futr::cpu
