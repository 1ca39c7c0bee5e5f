// The GPU engine's per-launch profile (futr bench --breakdown), one class for
// the decode micro-steps and the prefill chunks.
//
// A unit of work (a micro-step, a chunk) is profiled as a sequence of
// intervals: begin() records a start event, mark(row) an event after each
// launch, tagged with the launch's row (its kind: "qkv gemm", "attention",
// ...); after the caller synchronized the stream, accumulate() adds every
// interval end[i] - end[i-1] to its row and the whole span end[n] - start to
// the unit's total. Each row's time is the launch plus any gap before it
// (launches one by one: the decode step turns PDL off while profiling, so
// intervals do not overlap), and the rows' sum equals the unit's span.
//
//   graph_nodes = true:  the events are recorded with cudaEventRecordExternal,
//                        so that inside a stream capture each becomes an event
//                        record node of the graph (the decode step captures its
//                        profiled micro-steps and replays them once);
//   graph_nodes = false: plain cudaEventRecord (the prefill's eager chunks).
//
// Events are created on first use and reused by later units (their creation
// stays outside later timings). json() reports per unit, in row order, the
// rows that ran: {"<unit>s", "us_per_<unit>", "ops": [{"op",
// "us_per_<unit>", "launches_per_<unit>"}]}; the caller adds its own keys
// ("bucket", "rows").
//
// Tests: tests/gpu_engine/engine_test.cpp (every launch of a micro-step
// counted once, the rows tile the step), tests/gpu_engine/prefill_test.cpp
// (the same for a chunk).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace futr::gpu {

class Profiler {
 public:
  // names: the rows' names ([rows], static strings), in the order json() lists them.
  Profiler(std::span<const char* const> names, bool graph_nodes);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts a unit on `st` (the pending intervals of an unfinished one are dropped).
  void begin(cudaStream_t st);
  // The launch just enqueued on `st` was of kind `row`.
  void mark(int row, cudaStream_t st);
  // Adds the pending unit's intervals to the sums (the stream has synchronized);
  // nothing when no launch was marked since begin().
  void accumulate();
  // Sums back to zero (the events are kept).
  void reset();

  int64_t units() const { return units_; }
  // The sums per unit (null when no unit was accumulated); unit: "micro_step", "chunk".
  nlohmann::json json(const std::string& unit) const;

  int64_t rows = 0;  // the caller's count of rows over the profiled units (prefill: rows of the chunks)

 private:
  void record(cudaStream_t st);

  std::vector<const char*> names_;  // [rows]
  bool graph_nodes_;
  std::vector<cudaEvent_t> events_;  // [0]: the start; [i + 1]: after launch i
  std::vector<int> pending_;         // [launches of the unit] the row of launch i
  std::vector<double> us_;           // [rows] summed over the units
  std::vector<int64_t> calls_;       // [rows]
  int64_t units_ = 0;
  double unit_us_ = 0;  // start to last event, summed
};

}  // namespace futr::gpu
