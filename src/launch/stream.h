// RAII wrappers for streams, events and CUDA graphs. The decode step is
// captured once into a Graph and replayed: no allocation, no host sync, one
// launch per step.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "launch/check.h"

namespace futr::cuda {

class Stream {
 public:
  Stream() { FUTR_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  void sync() const { FUTR_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { FUTR_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s) { FUTR_CUDA_CHECK(cudaEventRecord(e_, s)); }
  void sync() { FUTR_CUDA_CHECK(cudaEventSynchronize(e_)); }
  // Milliseconds from `start` to this event (both recorded and completed).
  float since(const Event& start) const {
    float ms = 0;
    FUTR_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// A captured and instantiated CUDA graph.
class Graph {
 public:
  Graph() = default;
  ~Graph() { reset(); }
  Graph(Graph&& o) noexcept : g_(std::exchange(o.g_, nullptr)), x_(std::exchange(o.x_, nullptr)) {}
  Graph& operator=(Graph&& o) noexcept {
    if (this != &o) {
      reset();
      g_ = std::exchange(o.g_, nullptr);
      x_ = std::exchange(o.x_, nullptr);
    }
    return *this;
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Captures everything `body(stream)` enqueues on `s` (which must be a
  // non-default stream) and instantiates it.
  template <class F>
  static Graph capture(cudaStream_t s, F&& body) {
    Graph g;
    FUTR_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      body(s);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(s, &partial);
      if (partial) cudaGraphDestroy(partial);
      throw;
    }
    FUTR_CUDA_CHECK(cudaStreamEndCapture(s, &g.g_));
    FUTR_CUDA_CHECK(cudaGraphInstantiate(&g.x_, g.g_, 0));
    return g;
  }
  void launch(cudaStream_t s) const { FUTR_CUDA_CHECK(cudaGraphLaunch(x_, s)); }
  bool valid() const { return x_ != nullptr; }

 private:
  void reset() {
    if (x_) cudaGraphExecDestroy(x_);
    if (g_) cudaGraphDestroy(g_);
    x_ = nullptr;
    g_ = nullptr;
  }
  cudaGraph_t g_ = nullptr;
  cudaGraphExec_t x_ = nullptr;
};

}  // namespace futr::cuda
