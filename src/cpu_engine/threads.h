// Thread control of the CPU reference backend.
//
// One thread pool: OpenMP. Every parallel step (GEMM column slices in
// cpu_engine/linear.cpp, attention tasks and elementwise loops in cpu_engine/ops.cpp) is an
// OpenMP region, and OpenBLAS is called single-threaded from inside it.
//
// NOTE: the first version let OpenBLAS (pthreads build) run its own threads
// for GEMMs beside OpenMP for the rest. On the 2-core machine the two pools
// spin-wait against each other after every region: decode ran at 9 tokens/s
// with 2 threads against 25 with 1 (and 44 with GOMP_SPINCOUNT=0). With one
// pool there is nothing to compete with (docs/CPU_BACKEND.md).
//
// Every program linking futr_cpu_engine starts with OMP_WAIT_POLICY=passive unless
// the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (threads.cpp says why and
// how); on a dedicated machine OMP_WAIT_POLICY=active may be a little faster.
#pragma once

#include <string>

namespace futr::cpu {

// Uses n OpenMP threads (n <= 0: default_threads()) and sets OpenBLAS to one
// thread. Returns the count in use. When n is more than physical_cores(),
// prints a warning to stderr once per process and count (hyperthreads and
// oversubscribed cores slow the memory-bound GEMVs down instead of helping:
// docs/CPU_BACKEND.md).
int set_num_threads(int n);
// The physical cores this process may run on: distinct (package, core) pairs
// of the CPUs in its affinity mask, from /sys/devices/system/cpu/cpu*/topology;
// the number of CPUs in the mask when the topology is unreadable; at least 1.
int physical_cores();
// The logical CPUs (hardware threads) in this process's affinity mask.
int logical_cpus();
// The warning set_num_threads() prints for n threads ("" when n fits).
std::string oversubscription_warning(int n);
// The warning for `threads` threads when other processes keep the CPUs busy
// ("" when they fit): the 1-minute load average `load1` (runnable tasks,
// futr's own not yet among them) plus `threads` exceeds the `logical` CPUs by
// more than half a CPU. A thread that waits for a core stalls every other
// thread at the end of each parallel region: on a 2-core machine with one
// busy process, 2 threads decoded at 1.7 tokens/s and 1 thread at 9.6. The
// warning names the -t value that fits: logical - round(load1), at least 1.
std::string contention_warning(int threads, int logical, double load1);
// contention_warning() with this machine's logical_cpus() and load average
// (getloadavg; "" when it cannot be read).
std::string contention_warning(int threads);
// The default thread count: the physical cores (one left free above 4, for
// the system and the program's own other threads), and no more than the
// logical CPUs that other processes leave free, logical - round(load1) with
// `load1` the 1-minute load average (< 0: unknown, not counted); at least 1.
// Why: a thread that waits for a busy core stalls the others at the end of
// every parallel region (contention_warning() above).
int default_threads(int physical, int logical, double load1);
// default_threads() for this machine, its load read at the first call (the
// count stays the same for the rest of the process), and no more than
// OMP_NUM_THREADS where that is set: processes that share the machine (tests
// run several at a time) each take their share instead of every core.
int default_threads();
// The thread count an OMP_NUM_THREADS value asks for: its first entry ("8" or
// "8,2": the outer level) when that is an integer >= 1, else 0 (unset, empty
// or not a count: ignored).
int omp_num_threads_value(const char* value);
// omp_num_threads_value() of this process's OMP_NUM_THREADS.
int omp_num_threads_env();
// The count default_threads() would be on an idle machine (physical cores,
// one left free above 4).
int idle_default_threads();

// Decode steps that suddenly take far longer: another process took the
// cores. Fed the time of each decode step (one row), observe() returns a
// warning once, when a step takes more than kSlowdown times the median of
// the last kWindow steps (at least kMinSteps seen) and the load average says
// the CPUs are oversubscribed (threads + load1 > logical + 0.5); "" otherwise.
class ContentionWatch {
 public:
  static constexpr double kSlowdown = 4.0;
  static constexpr int kWindow = 32;
  static constexpr int kMinSteps = 8;
  explicit ContentionWatch(int threads) : threads_(threads) {}
  std::string observe(double seconds, int logical, double load1);
  std::string observe(double seconds);  // this machine's logical CPUs and load average
 private:
  int threads_;
  double recent_[kWindow] = {};  // ring of the last step times, seconds
  int seen_ = 0;
  bool warned_ = false;
};

// Sets OpenBLAS to one thread once per process (called by every BLAS user in
// futr_cpu_engine, so a program that never calls set_num_threads() is still right).
void ensure_single_threaded_blas();
// Threads OpenMP regions use.
int num_threads();
// A line for reports: OpenMP threads and the OpenBLAS build.
std::string threading_info();

}  // namespace futr::cpu
