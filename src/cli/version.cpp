// `futr --version`: see version.h.
#include "cli/version.h"

#include <fmt/format.h>

#include "core/build_info.h"

#if FUTR_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "launch/device.h"
#endif

#ifndef FUTR_VERSION
#define FUTR_VERSION "unknown"
#endif
#ifndef FUTR_BUILD_TYPE
#define FUTR_BUILD_TYPE "unknown"
#endif

namespace futr::cli {

namespace {
#if FUTR_HAVE_CUDA
// 13000 -> "13.0"
std::string cuda_version(int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, v % 1000 / 10) : "none"; }
#endif
}  // namespace

bool built_with_cuda() { return FUTR_HAVE_CUDA != 0; }

std::string version_text() {
  std::string s =
      fmt::format("futr {} (commit {}, {} build)\n", FUTR_VERSION, build_commit(), FUTR_BUILD_TYPE);
#if FUTR_HAVE_CUDA
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;  // 0: no driver installed
  s += fmt::format("CUDA: nvcc {}, kernels for sm_{}, runtime {} (static), driver {}\n",
                   FUTR_CUDA_COMPILER_VERSION, FUTR_CUDA_ARCHITECTURES, cuda_version(runtime),
                   driver > 0 ? cuda_version(driver) : "none found (no libcuda.so.1)");
  std::string why;
  if (const auto d = cuda::probe_device(&why)) {
    s += fmt::format("GPU: {} (sm_{}{}, {} SMs, {:.1f} GiB)", d->name, d->cc_major, d->cc_minor, d->sm_count,
                     double(d->global_mem) / (1024.0 * 1024.0 * 1024.0));
  } else {
    s += "GPU: none usable: " + why;
  }
#else
  s += "CUDA: not in this build (configured without a CUDA compiler): CPU engines only\n";
  s += "GPU: not probed (no CUDA in this build)";
#endif
  return s;
}

}  // namespace futr::cli
