// Benchmark harness shared by every bench/ program.
//
// - time_median_ms(): CUDA events around each rep after warm-up, median over
//   reps; optionally a cold L2 (a memset over 2x the L2 size between reps,
//   outside the timed region) so weights are read from HBM as in a real step.
// - measure_ceilings(): the roofline ceilings of this run's GPU, measured in the
//   same process as the kernels they judge: device-to-device copy bandwidth
//   (bytes read + written), cuBLASLt BF16 and FP8 8192^3 on random data.
// - Report: rows of a roofline table, printed as markdown and written as JSON.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace futr::bench {

struct TimeOptions {
  int warmup = 10;
  int reps = 50;
  bool cold_l2 = true;
};

// Median milliseconds of fn(stream) over opt.reps launches.
double time_median_ms(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                      const TimeOptions& opt = {});

struct Ceilings {
  double copy_gbs = 0;     // device-to-device copy, (read + write) bytes / s / 1e9
  double bf16_tflops = 0;  // cuBLASLt BF16 8192^3
  double fp8_tflops = 0;   // cuBLASLt E4M3 8192^3, per-tensor scales, BF16 out
};

// Measures the ceilings (about 1 s). `gemms` = false skips the two GEMMs.
Ceilings measure_ceilings(cudaStream_t s, bool gemms = true);

// A markdown + JSON table. Columns are given once; rows are JSON objects whose
// keys are the column names (missing keys print as "-").
class Report {
 public:
  Report(std::string title, std::vector<std::string> columns);
  void add(nlohmann::json row);
  void set_meta(const std::string& key, nlohmann::json value) { meta_[key] = std::move(value); }
  std::string markdown() const;
  nlohmann::json json() const;
  // Writes json() to `path` if non-empty; prints markdown() to stdout.
  void emit(const std::string& json_path) const;

 private:
  std::string title_;
  std::vector<std::string> cols_;
  std::vector<nlohmann::json> rows_;
  nlohmann::json meta_ = nlohmann::json::object();
};

// A clean L2 flush: one read pass over `bytes` (2x the L2) of `buf`.
void flush_l2_read(const void* buf, size_t bytes, unsigned* sink, cudaStream_t s);

// The no-compute floor of a memory-bound kernel: one launch reading `count`
// (<= 4) regions of 16-byte multiples with 16-byte loads, 4 in flight per thread
// (4 CTAs of 256 threads per SM); pdl: launched as a programmatic dependent
// (first loads issued before griddepcontrol.wait, as the decode kernels do);
// blocked: each CTA reads one contiguous slice of each region (the access
// pattern of kernels that give each CTA its own run of the matrix) instead of
// a grid-stride sweep.
void read_regions(const void* const* ptrs, const size_t* bytes, int count, int sm_count, unsigned* sink,
                  cudaStream_t s, bool pdl = false, bool blocked = false);

// Median microseconds of one CUDA-graph replay of fn (captured once after a
// plain warm-up call), CUDA events around each replay, L2 flushed before every
// rep by a clean read pass (or a memset, memset_flush) over 2x the L2 size.
class GraphTimer {
 public:
  GraphTimer(int reps, bool memset_flush = false);
  ~GraphTimer();
  double us(const std::function<void(cudaStream_t)>& fn, cudaStream_t s);
  int reps() const { return reps_; }

 private:
  void flush(cudaStream_t s);
  int reps_;
  bool memset_;
  void* flush_ = nullptr;  // 2x L2 bytes
  unsigned* sink_ = nullptr;
  size_t bytes_ = 0;
};

// "NVIDIA H200, 132 SMs, driver 13.0" plus the git commit baked in at build time.
nlohmann::json environment_json();

// Command-line lists: "a,b,c" -> {"a", "b", "c"} (empty items dropped), and as ints.
std::vector<std::string> split_list(const std::string& s);
std::vector<int> split_ints(const std::string& s);

}  // namespace futr::bench
