// Device discovery. FuTransformer's kernels need an sm_90 (Hopper) GPU; without
// one (no driver, no device, another architecture) the CPU backend runs and GPU
// tests skip with the reason gpu_unavailable_reason() gives.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <thread>

namespace futr::cuda {

struct DeviceInfo {
  int id = 0;
  std::string name;  // e.g. "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;        // multiprocessors: grid sizes come from here, never hard-coded
  size_t l2_bytes = 0;     // L2 size (benchmarks flush it between reps)
  size_t smem_optin = 0;   // max dynamic shared memory per block after opt-in
  size_t global_mem = 0;   // bytes
  int driver_version = 0;  // e.g. 13000
};

// The current device if it is a usable Hopper GPU; otherwise nullopt and, if
// `why` is given, the reason ("no CUDA driver", "compute capability 8.0 ...").
std::optional<DeviceInfo> probe_device(std::string* why = nullptr);

// Reason string when no usable GPU is present, "" when one is.
std::string gpu_unavailable_reason();

// The usable device; throws futr::Error with the reason if there is none.
const DeviceInfo& require_device();

// Creates the device's primary context on a thread of its own (cudaFree(0):
// a few hundred milliseconds on an H200), so that a caller can overlap it with
// CPU work (the engine factory: quantizing on load). join() waits for it;
// the destructor joins. Without a usable device it does nothing.
class ContextWarmup {
 public:
  ContextWarmup();
  ~ContextWarmup();
  ContextWarmup(const ContextWarmup&) = delete;
  ContextWarmup& operator=(const ContextWarmup&) = delete;
  void join();

 private:
  std::thread thread_;
};

}  // namespace futr::cuda
