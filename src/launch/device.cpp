#include "launch/device.h"

#include <cuda_runtime.h>

#include <mutex>

#include "core/error.h"
#include "launch/check.h"

namespace futr::cuda {

namespace {
struct Probe {
  std::optional<DeviceInfo> info;
  std::string why;
};

Probe do_probe() {
  Probe p;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // Without a driver this is cudaErrorInsufficientDriver or cudaErrorNoDevice.
    p.why = fmt::format("no usable CUDA device ({}: {})", cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();  // clear the sticky-free error so later probes start clean
    return p;
  }
  if (count == 0) {
    p.why = "no CUDA device present";
    return p;
  }
  int dev = 0;
  FUTR_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  FUTR_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9 || prop.minor != 0) {
    p.why = fmt::format(
        "device 0 ({}) has compute capability {}.{}; FuTransformer's kernels need "
        "sm_90 (Hopper: H100/H200)",
        prop.name, prop.major, prop.minor);
    return p;
  }
  DeviceInfo d;
  d.id = dev;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = size_t(prop.l2CacheSize);
  d.smem_optin = prop.sharedMemPerBlockOptin;
  d.global_mem = prop.totalGlobalMem;
  FUTR_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  p.info = d;
  return p;
}

const Probe& cached_probe() {
  static std::once_flag once;
  static Probe probe;
  std::call_once(once, [] { probe = do_probe(); });
  return probe;
}
}  // namespace

std::optional<DeviceInfo> probe_device(std::string* why) {
  const Probe& p = cached_probe();
  if (why) *why = p.why;
  return p.info;
}

std::string gpu_unavailable_reason() { return cached_probe().why; }

ContextWarmup::ContextWarmup() {
  if (!cached_probe().info) return;
  thread_ = std::thread([] { cudaFree(nullptr); });
}
ContextWarmup::~ContextWarmup() { join(); }
void ContextWarmup::join() {
  if (thread_.joinable()) thread_.join();
}

const DeviceInfo& require_device() {
  const Probe& p = cached_probe();
  FUTR_CHECK(p.info.has_value(), "GPU backend unavailable: {}", p.why);
  return *p.info;
}

}  // namespace futr::cuda
