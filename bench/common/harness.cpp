#include "common/harness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/build_info.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/cublaslt.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/stream.h"

namespace futr::bench {

double time_median_ms(const std::function<void(cudaStream_t)>& fn, cudaStream_t s, const TimeOptions& opt) {
  const auto& dev = cuda::require_device();
  static cuda::DeviceBuffer<uint8_t> flush(2 * dev.l2_bytes);
  for (int i = 0; i < opt.warmup; ++i) fn(s);
  FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<cuda::Event> start(size_t(opt.reps)), stop(size_t(opt.reps));
  for (int i = 0; i < opt.reps; ++i) {
    if (opt.cold_l2) FUTR_CUDA_CHECK(cudaMemsetAsync(flush.get(), i & 0xff, flush.bytes(), s));
    start[size_t(i)].record(s);
    fn(s);
    stop[size_t(i)].record(s);
  }
  FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int i = 0; i < opt.reps; ++i) ms.push_back(stop[size_t(i)].since(start[size_t(i)]));
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

GraphTimer::GraphTimer(int reps, bool memset_flush)
    : reps_(reps), memset_(memset_flush), bytes_(2 * cuda::require_device().l2_bytes) {
  FUTR_CUDA_CHECK(cudaMalloc(&flush_, bytes_));
  FUTR_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink_), sizeof(unsigned)));
  cuda::fill_random(flush_, cuda::FillType::kU32, bytes_ / 4, 99, 0, 0, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
}

GraphTimer::~GraphTimer() {
  cudaFree(flush_);
  cudaFree(sink_);
}

void GraphTimer::flush(cudaStream_t s) {
  if (memset_) FUTR_CUDA_CHECK(cudaMemsetAsync(flush_, 0, bytes_, s));
  else flush_l2_read(flush_, bytes_, sink_, s);
}

double GraphTimer::us(const std::function<void(cudaStream_t)>& fn, cudaStream_t s) {
  fn(s);  // creates plans / loads modules outside the capture
  FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
  cuda::Graph g = cuda::Graph::capture(s, fn);
  for (int i = 0; i < 3; ++i) g.launch(s);
  std::vector<cuda::Event> a(static_cast<size_t>(reps_)), b(static_cast<size_t>(reps_));
  for (int r = 0; r < reps_; ++r) {
    flush(s);
    a[size_t(r)].record(s);
    g.launch(s);
    b[size_t(r)].record(s);
  }
  FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < reps_; ++r) t.push_back(1e3 * b[size_t(r)].since(a[size_t(r)]));
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

Ceilings measure_ceilings(cudaStream_t s, bool gemms) {
  Ceilings c;
  {
    const size_t bytes = size_t(2) << 30;  // 2 GiB: far beyond L2
    cuda::DeviceBuffer<uint8_t> a(bytes), b(bytes);
    cuda::fill_random(a.get(), cuda::FillType::kU32, bytes / 4, 1, 0, 0, s);
    const double ms = time_median_ms(
        [&](cudaStream_t st) {
          FUTR_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, st));
        },
        s, {3, 10, false});
    c.copy_gbs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  }
  if (gemms) {
    const int n = 8192;
    cuda::CublasLt lt;
    cuda::DeviceBuffer<uint16_t> a(size_t(n) * n), b(size_t(n) * n), out(size_t(n) * n);
    cuda::DeviceBuffer<uint8_t> a8(size_t(n) * n), b8(size_t(n) * n);
    cuda::DeviceBuffer<float> scale(2);
    cuda::fill_random(a.get(), cuda::FillType::kBF16, a.size(), 2, -1, 1, s);
    cuda::fill_random(b.get(), cuda::FillType::kBF16, b.size(), 3, -1, 1, s);
    cuda::fill_random(a8.get(), cuda::FillType::kE4M3, a8.size(), 4, -4, 4, s);
    cuda::fill_random(b8.get(), cuda::FillType::kE4M3, b8.size(), 5, -4, 4, s);
    cuda::fill_random(scale.get(), cuda::FillType::kF32, 2, 6, 0.5f, 1.0f, s);
    const double flop = 2.0 * n * double(n) * n;
    double ms = time_median_ms(
        [&](cudaStream_t st) {
          lt.matmul(cuda::LtInput::kBF16, a.get(), b.get(), out.get(), n, n, n, nullptr, nullptr, st);
        },
        s, {3, 10, false});
    c.bf16_tflops = flop / (ms * 1e-3) / 1e12;
    ms = time_median_ms(
        [&](cudaStream_t st) {
          lt.matmul(cuda::LtInput::kE4M3, a8.get(), b8.get(), out.get(), n, n, n, scale.get(),
                    scale.get() + 1, st);
        },
        s, {3, 10, false});
    c.fp8_tflops = flop / (ms * 1e-3) / 1e12;
  }
  return c;
}

Report::Report(std::string title, std::vector<std::string> columns)
    : title_(std::move(title)), cols_(std::move(columns)) {}

void Report::add(nlohmann::json row) { rows_.push_back(std::move(row)); }

static std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d != 0 && (std::abs(d) >= 1e5 || std::abs(d) < 1e-3)) return fmt::format("{:.3g}", d);
    return fmt::format("{:.{}f}", d, std::abs(d) >= 100 ? 1 : (std::abs(d) >= 10 ? 2 : 3));
  }
  return v.dump();
}

std::string Report::markdown() const {
  std::string s = "### " + title_ + "\n\n|";
  for (const auto& c : cols_) s += fmt::format(" {} |", c);
  s += "\n|";
  for (size_t i = 0; i < cols_.size(); ++i) s += "---|";
  s += "\n";
  for (const auto& r : rows_) {
    s += "|";
    for (const auto& c : cols_) s += fmt::format(" {} |", cell(r.contains(c) ? r.at(c) : nlohmann::json()));
    s += "\n";
  }
  return s;
}

nlohmann::json Report::json() const {
  nlohmann::json j;
  j["title"] = title_;
  j["environment"] = environment_json();
  j["meta"] = meta_;
  j["columns"] = cols_;
  j["rows"] = rows_;
  return j;
}

void Report::emit(const std::string& json_path) const {
  std::fputs(markdown().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    FUTR_CHECK(f.good(), "cannot write {}", json_path);
    f << json().dump(2) << "\n";
  }
}

nlohmann::json environment_json() {
  const auto& d = cuda::require_device();
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return {{"gpu", d.name},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"driver", d.driver_version},
          {"commit", futr::build_commit()},
          {"date", date}};
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

std::vector<int> split_ints(const std::string& s) {
  std::vector<int> out;
  for (const std::string& t : split_list(s)) out.push_back(std::stoi(t));
  return out;
}

}  // namespace futr::bench
