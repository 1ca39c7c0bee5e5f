// NCCL loaded with dlopen (see nccl.h): the handful of entry points tensor
// parallelism uses, resolved once, checked on every call.
#include "gpu_engine/nccl.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "launch/check.h"

#if FUTR_HAVE_NCCL
#include <nccl.h>
#endif

namespace futr::gpu {

#if FUTR_HAVE_NCCL
namespace {

// The entry points, from libnccl.so.2 (the runtime library of every NCCL 2.x).
struct Lib {
  bool ok = false;
  std::string why;
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
};

const Lib& lib() {
  static Lib l;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name : {"libnccl.so.2", "libnccl.so"})
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      l.why =
          "libnccl.so.2 was not found (install NCCL, e.g. the Debian/Ubuntu package libnccl2, or put its "
          "directory on LD_LIBRARY_PATH)";
      return;
    }
    bool all = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) {
        all = false;
        l.why = std::string("libnccl.so.2 lacks ") + name;
      }
    };
    sym(l.get_version, "ncclGetVersion");
    sym(l.comm_init_all, "ncclCommInitAll");
    sym(l.all_reduce, "ncclAllReduce");
    sym(l.comm_destroy, "ncclCommDestroy");
    sym(l.comm_abort, "ncclCommAbort");
    sym(l.async_error, "ncclCommGetAsyncError");
    sym(l.error_string, "ncclGetErrorString");
    l.ok = all;
  });
  return l;
}

void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  const Lib& l = lib();
  fail("NCCL {} failed: {} ({})", what, l.error_string ? l.error_string(r) : "?", int(r));
}

}  // namespace

bool NcclComms::available(std::string* why) {
  const Lib& l = lib();
  if (!l.ok && why) *why = l.why;
  return l.ok;
}

std::string NcclComms::version() {
  const Lib& l = lib();
  int v = 0;
  if (!l.ok || l.get_version(&v) != ncclSuccess) return "";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

NcclComms::NcclComms(const std::vector<int>& devices) : devices_(devices) {
  std::string why;
  FUTR_CHECK(available(&why), "tensor parallelism needs NCCL: {}", why);
  FUTR_CHECK(!devices.empty(), "NCCL: no devices");
  // Connect every pair at init, not at the first collective (that one is
  // captured into a CUDA graph): an environment setting wins.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> c(devices.size(), nullptr);
  check(lib().comm_init_all(c.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
  for (ncclComm_t x : c) comms_.push_back(x);
}

NcclComms::~NcclComms() {
  if (aborted_) return;  // abort() freed them
  for (void* c : comms_)
    if (c) lib().comm_destroy(static_cast<ncclComm_t>(c));
}

void NcclComms::all_reduce_bf16(void* buf, size_t count, int rank, cudaStream_t stream) {
  // NOTE: no lock here: a collective may wait on the host for its peers, and
  // abort() must be able to end that wait. After an abort the engines make no
  // more calls (TpGpuEngine refuses further steps).
  FUTR_CHECK(!aborted_, "NCCL: the communicators were aborted (a rank failed)");
  check(lib().all_reduce(buf, buf, count, ncclBfloat16, ncclSum,
                         static_cast<ncclComm_t>(comms_[size_t(rank)]), stream),
        "all-reduce");
}

void NcclComms::abort() {
  const std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.exchange(true)) return;
  for (void* c : comms_)
    if (c) lib().comm_abort(static_cast<ncclComm_t>(c));
}

void NcclComms::synchronize(int rank, cudaStream_t stream, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    FUTR_CHECK(q == cudaErrorNotReady, "GPU rank {}: {}", rank, cudaGetErrorString(q));
    ncclResult_t e = ncclSuccess;
    {
      const std::lock_guard<std::mutex> lock(mu_);  // the communicator is not freed meanwhile
      if (!aborted_)
        check(lib().async_error(static_cast<ncclComm_t>(comms_[size_t(rank)]), &e), "ncclCommGetAsyncError");
    }
    if (e != ncclSuccess && e != ncclInProgress) {
      abort();
      fail("NCCL: rank {}'s communicator reported {} ({}); every rank aborted", rank, lib().error_string(e),
           int(e));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    FUTR_CHECK(!aborted_, "tensor parallelism: rank {}'s step was aborted (another rank failed)", rank);
    if (s > timeout_s) {
      abort();
      fail(
          "tensor parallelism: rank {}'s step did not finish within {:.0f} s (a rank failed or stopped); "
          "every "
          "rank aborted",
          rank, timeout_s);
    }
    // A micro-step takes ~0.1-10 ms: spin (yielding) for the first millisecond, then sleep.
    if (s < 1e-3) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

#else  // no NCCL header at build time

bool NcclComms::available(std::string* why) {
  if (why) *why = "this build has no NCCL (its header was not found when futr was configured)";
  return false;
}
std::string NcclComms::version() { return ""; }
NcclComms::NcclComms(const std::vector<int>& devices) : devices_(devices) {
  fail(
      "tensor parallelism needs NCCL: this build has no NCCL (its header was not found when futr was "
      "configured)");
}
NcclComms::~NcclComms() = default;
void NcclComms::all_reduce_bf16(void*, size_t, int, cudaStream_t) { fail("no NCCL in this build"); }
void NcclComms::synchronize(int, cudaStream_t, double) { fail("no NCCL in this build"); }
void NcclComms::abort() { aborted_ = true; }  // nothing to free

#endif

}  // namespace futr::gpu
