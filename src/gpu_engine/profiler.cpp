// The GPU engine's per-launch profile (see profiler.h).
#include "gpu_engine/profiler.h"

#include <algorithm>

#include "launch/check.h"

namespace futr::gpu {

Profiler::Profiler(std::span<const char* const> names, bool graph_nodes)
    : names_(names.begin(), names.end()),
      graph_nodes_(graph_nodes),
      us_(names.size(), 0.0),
      calls_(names.size(), 0) {}

Profiler::~Profiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void Profiler::begin(cudaStream_t st) {
  pending_.clear();
  record(st);
}

void Profiler::mark(int row, cudaStream_t st) {
  pending_.push_back(row);
  record(st);
}

void Profiler::record(cudaStream_t st) {
  const size_t i = pending_.size();
  if (i >= events_.size()) {
    cudaEvent_t e;
    FUTR_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  // External: inside a stream capture this becomes an event record node of the
  // graph (a plain record would only be a capture-internal dependency).
  if (graph_nodes_) FUTR_CUDA_CHECK(cudaEventRecordWithFlags(events_[i], st, cudaEventRecordExternal));
  else FUTR_CUDA_CHECK(cudaEventRecord(events_[i], st));
}

void Profiler::accumulate() {
  if (pending_.empty()) return;
  for (size_t i = 0; i < pending_.size(); ++i) {
    float ms = 0;
    FUTR_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    us_[size_t(pending_[i])] += 1e3 * ms;
    ++calls_[size_t(pending_[i])];
  }
  float ms = 0;
  FUTR_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[pending_.size()]));
  unit_us_ += 1e3 * ms;
  ++units_;
  pending_.clear();
}

void Profiler::reset() {
  std::fill(us_.begin(), us_.end(), 0.0);
  std::fill(calls_.begin(), calls_.end(), 0);
  units_ = 0;
  unit_us_ = 0;
  rows = 0;
}

nlohmann::json Profiler::json(const std::string& unit) const {
  if (units_ == 0) return nullptr;
  const double n = double(units_);
  nlohmann::json ops = nlohmann::json::array();
  for (size_t i = 0; i < names_.size(); ++i)
    if (calls_[i] > 0)
      ops.push_back({{"op", names_[i]},
                     {"us_per_" + unit, us_[i] / n},
                     {"launches_per_" + unit, double(calls_[i]) / n}});
  return {{unit + "s", units_}, {"us_per_" + unit, unit_us_ / n}, {"ops", ops}};
}

}  // namespace futr::gpu
