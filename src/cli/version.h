// What this `futr` is: its version, commit, build type, whether CUDA is in the
// build (and which), and the GPU it sees. `futr --version` prints
// version_text(). (`--backend gpu` in a CPU-only build: engines/factory.cpp.)
//
//   futr 0.1.0 (commit 4b32ee8abcd1, Release build)
//   CUDA: nvcc 13.0.88, kernels for sm_90a, runtime 13.0 (static), driver 13.0
//   GPU: NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)          <- or "none usable: <why>"
//
// A CPU-only build (configured without a CUDA compiler: CMakeLists.txt) says
// so on the CUDA line and does not probe. Tested by tests/cli/futr_e2e_test.cpp.
#pragma once

#include <string>

namespace futr::cli {

// True when the CUDA code (src/launch, the GPU kernels) is in this build.
bool built_with_cuda();
// The three lines above (no trailing newline). Probes the GPU (once).
std::string version_text();

}  // namespace futr::cli
