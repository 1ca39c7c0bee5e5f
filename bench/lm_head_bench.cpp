// LM head benchmark: our streaming kernel (launch/lm_head.h; the BF16 head,
// and with --formats int4 the INT4 head, groups of 128 or 64 by K) against
// cuBLASLt's BF16 GEMM with FP32 output (the peer, and the engine's head
// today) and the no-compute floor (one launch reading the head's bytes with
// 16-byte loads), all in the same run. Shapes: the heads of SmolLM2-135M
// (49152 x 576), Llama-3.1-8B (128256 x 4096) and Llama-3.1-70B
// (128256 x 8192), M = rows of the micro-step. Per row: time (median of
// CUDA-graph replays, CUDA events, after a warm-up call; L2 flushed by a
// clean read pass before each rep), the head's MB, GB/s, % of the floor,
// cuBLASLt at M and at M = 32 (the engine runs cuBLASLt at 32 rows for every
// bucket: its kernel, and so its summation order, changes with M) and our
// speedup over each (the INT4 head's floor: its nibbles and scales). Prints
// markdown, writes JSON.
//
// usage: lm_head_bench [--models smollm2,8b,70b] [--m 1,2,4,8,16,32] [--formats bf16,int4] [--reps N]
//          [--json out.json]
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/harness.h"
#include "core/error.h"
#include "launch/buffer.h"
#include "launch/cublaslt.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/lm_head.h"
#include "launch/stream.h"

using namespace futr;
using json = nlohmann::json;

namespace {

struct Shape {
  const char* key;
  const char* model;
  int n, k;
};
constexpr Shape kShapes[] = {
    {"smollm2", "SmolLM2-135M", 49152, 576},
    {"8b", "Llama-3.1-8B", 128256, 4096},
    {"70b", "Llama-3.1-70B", 128256, 8192},
};

struct Options {
  std::vector<std::string> models{"smollm2", "8b", "70b"};
  std::vector<int> ms{1, 2, 4, 8, 16, 32};
  std::vector<std::string> formats{"bf16", "int4"};
  int reps = 30;
  std::string json_path;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      FUTR_CHECK(i + 1 < argc, "{} needs a value", a);
      return argv[++i];
    };
    if (a == "--models") o.models = bench::split_list(next());
    else if (a == "--m") o.ms = bench::split_ints(next());
    else if (a == "--formats") o.formats = bench::split_list(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--json") o.json_path = next();
    else fail("unknown option {}", a);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const cuda::DeviceInfo& dev = cuda::require_device();
  cuda::Stream stream;
  bench::GraphTimer timer(o.reps);
  cuda::CublasLt lt;
  cuda::DeviceBuffer<unsigned> sink(1);
  bench::Report rep("LM head: streaming kernel vs cuBLASLt BF16 (FP32 out) and the read floor, " + dev.name,
                    {"model", "N", "K", "head", "M", "config", "us", "MB", "GB/s", "floor us", "% of floor",
                     "cublaslt us", "cublaslt M=32 us", "x cublaslt", "x cublaslt M=32"});
  rep.set_meta("environment", bench::environment_json());
  rep.set_meta(
      "timing",
      fmt::format("median of {} CUDA-graph replays, CUDA events, L2 flushed by a read pass", o.reps));
  for (const std::string& key : o.models) {
    const Shape* sh = nullptr;
    for (const Shape& s : kShapes)
      if (key == s.key) sh = &s;
    FUTR_CHECK(sh, "unknown model {} (smollm2, 8b, 70b)", key);
    const size_t wn = size_t(sh->n) * size_t(sh->k);
    cuda::DeviceBuffer<uint16_t> w(wn), x(size_t(cuda::kLmHeadMaxRows) * size_t(sh->k));
    cuda::DeviceBuffer<float> out(size_t(cuda::kLmHeadMaxRows) * size_t(sh->n));
    cuda::fill_random(w.get(), cuda::FillType::kBF16, wn, 1, -0.05f, 0.05f, stream);
    cuda::fill_random(x.get(), cuda::FillType::kBF16, x.size(), 2, -1, 1, stream);
    auto cublas = [&](int m) {
      return timer.us(
          [&](cudaStream_t st) {
            lt.matmul(cuda::LtInput::kBF16, x.get(), w.get(), out.get(), m, sh->n, sh->k, nullptr, nullptr,
                      st, cuda::LtOutput::kF32);
          },
          stream);
    };
    const double lt32 = cublas(cuda::kLmHeadMaxRows);
    std::vector<double> ltm(o.ms.size());
    for (size_t i = 0; i < o.ms.size(); ++i)
      ltm[i] = o.ms[i] == cuda::kLmHeadMaxRows ? lt32 : cublas(o.ms[i]);
    for (const std::string& f : o.formats) {
      FUTR_CHECK(f == "bf16" || f == "int4", "unknown head format {} (bf16, int4)", f);
      const bool int4 = f == "int4";
      const int group = sh->k % 128 == 0 ? 128 : 64;  // the quantizer's rule (quant::int4_group_for)
      // The INT4 head: random nibbles and FP16 scales in fragment order (the kernel reads them as any).
      cuda::DeviceBuffer<uint8_t> q(int4 ? wn / 2 : 0);
      cuda::DeviceBuffer<uint16_t> sc(int4 ? wn / size_t(group) : 0);
      if (int4) {
        cuda::fill_random(q.get(), cuda::FillType::kU8, q.size(), 3, 0, 0, stream);
        cuda::fill_random(sc.get(), cuda::FillType::kF16, sc.size(), 4, 0.002f, 0.02f, stream);
      }
      const void* ptrs[2] = {int4 ? static_cast<const void*>(q.get()) : w.get(), sc.get()};
      const size_t bytes[2] = {int4 ? wn / 2 : wn * 2, int4 ? sc.size() * 2 : 0};
      const double floor_us = timer.us(
          [&](cudaStream_t st) {
            bench::read_regions(ptrs, bytes, int4 ? 2 : 1, dev.sm_count, sink.get(), st);
          },
          stream);
      const double mb = double(bytes[0] + bytes[1]) / 1e6;
      for (size_t i = 0; i < o.ms.size(); ++i) {
        const int m = o.ms[i];
        const cuda::LmHeadArgs a{int4 ? static_cast<const void*>(q.get()) : w.get(),
                                 x.get(),
                                 out.get(),
                                 0,
                                 m,
                                 sh->n,
                                 sh->k,
                                 int4 ? sc.get() : nullptr,
                                 group};
        const double us = timer.us([&](cudaStream_t st) { cuda::lm_head(a, st); }, stream);
        rep.add({{"model", sh->model},
                 {"N", sh->n},
                 {"K", sh->k},
                 {"head", f},
                 {"M", m},
                 {"config", cuda::lm_head_describe(m, int4 ? group : 0)},
                 {"us", us},
                 {"MB", mb},
                 {"GB/s", mb * 1e6 / (us * 1e-6) / 1e9},
                 {"floor us", floor_us},
                 {"% of floor", 100.0 * floor_us / us},
                 {"cublaslt us", ltm[i]},
                 {"cublaslt M=32 us", lt32},
                 {"x cublaslt", ltm[i] / us},
                 {"x cublaslt M=32", lt32 / us}});
      }
    }
  }
  rep.emit(o.json_path);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "lm_head_bench: %s\n", e.what());
  return 1;
}
