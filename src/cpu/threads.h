// Thread control of the CPU reference backend: OpenBLAS runs the GEMMs with
// its own thread pool, OpenMP runs attention's softmax and the elementwise
// steps. Both are set to the same count (they run one after the other, never
// nested).
#pragma once

#include <string>

namespace futr::cpu {

// Sets both pools to n threads (n <= 0: all hardware threads). Returns the
// count in use.
int set_num_threads(int n);
// Threads currently used by OpenMP regions.
int num_threads();
// "OpenBLAS <config>, OpenMP <n> threads" for reports.
std::string threading_info();

}  // namespace futr::cpu
