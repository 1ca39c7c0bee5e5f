// NCCL for tensor parallelism (runtime/tensor_parallel.h has the
// split), loaded at run time: futr links no NCCL library, so a machine without
// one runs everything but `--tp N > 1`, which then says what is missing.
//
// One process drives every rank, a host thread per GPU; ncclCommInitAll makes
// the N communicators (rank r on devices[r]). A collective runs on the
// calling rank's stream and can be captured into that rank's CUDA graph (the
// engines capture thread-locally). Every NCCL call is checked (the message
// names the call and NCCL's reason). A collective that does not complete
// within the timeout (a rank that died or never joined) makes synchronize()
// abort every communicator and throw, so no rank waits forever; abort() lets
// a failing rank release the others at once.
//
// Built with NCCL's header when CMake finds it (FUTR_HAVE_NCCL); without it
// available() is false and the constructor throws, naming the build.
// Test: tests/gpu_engine/tp_engine_test.cpp (one rank on one GPU; N ranks where N GPUs exist).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace futr::gpu {

class NcclComms {
 public:
  // Communicators for `devices` (rank r on devices[r]). futr::Error when NCCL
  // cannot be loaded or initialized.
  explicit NcclComms(const std::vector<int>& devices);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  int size() const { return int(devices_.size()); }
  int device(int rank) const { return devices_[size_t(rank)]; }

  // In-place sum of `count` BF16 values over the ranks (rank r's part, on its stream).
  void all_reduce_bf16(void* buf, size_t count, int rank, cudaStream_t stream);
  // Waits for rank r's stream, polling it and the communicator's asynchronous
  // error; after timeout_s seconds (or an NCCL error) aborts every
  // communicator and throws futr::Error naming the rank and the reason.
  void synchronize(int rank, cudaStream_t stream, double timeout_s);
  // Aborts every communicator (a rank failed: the others' collectives end
  // with an error instead of waiting). Idempotent.
  void abort();
  bool aborted() const { return aborted_.load(); }

  // Whether NCCL can be used here; `why` says what is missing otherwise.
  static bool available(std::string* why = nullptr);
  static std::string version();  // "2.28.3", or "" when unavailable

 private:
  std::vector<int> devices_;
  std::vector<void*> comms_;  // ncclComm_t per rank (freed by abort(): never used after it)
  std::atomic<bool> aborted_{false};
  std::mutex mu_;  // abort() against synchronize()'s error queries from other ranks' threads
};

}  // namespace futr::gpu
