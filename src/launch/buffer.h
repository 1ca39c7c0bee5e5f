// DeviceBuffer<T>: an owned cudaMalloc allocation (never managed memory) with
// typed upload/download. Sizes are element counts.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "launch/check.h"

namespace futr::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_) FUTR_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host, cudaStream_t s = nullptr) : DeviceBuffer(host.size()) {
    upload(host, s);
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const T* host, size_t n, cudaStream_t s = nullptr) {
    FUTR_CHECK(n <= n_, "DeviceBuffer::upload: {} elements into a buffer of {}", n, n_);
    FUTR_CUDA_CHECK(cudaMemcpyAsync(p_, host, n * sizeof(T), cudaMemcpyHostToDevice, s));
    FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  void upload(const std::vector<T>& host, cudaStream_t s = nullptr) { upload(host.data(), host.size(), s); }
  std::vector<T> download(cudaStream_t s = nullptr) const {
    std::vector<T> h(n_);
    FUTR_CUDA_CHECK(cudaMemcpyAsync(h.data(), p_, bytes(), cudaMemcpyDeviceToHost, s));
    FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
  }
  // Fill every byte with `byte` (tests poison outputs with 0xff: BF16 NaN).
  void fill_bytes(int byte, cudaStream_t s = nullptr) {
    FUTR_CUDA_CHECK(cudaMemsetAsync(p_, byte, bytes(), s));
  }

 private:
  void reset() {
    if (p_) cudaFree(p_);  // no check: destructors must not throw
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace futr::cuda
