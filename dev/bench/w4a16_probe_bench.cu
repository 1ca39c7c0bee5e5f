// w4a16_probe_bench: the floor with the decode GEMM's work added piece by piece
// (dev/bench/w4a16_probe.cuh), on the byte counts of the 8B gate_up
// projection (58.7 MB) and of a 1 GiB stream; median of CUDA-graph replays
// with the L2 flushed before each (bench::GraphTimer). Prints a markdown table
// (us, TB/s, x the floor) and writes JSON with --json PATH.
#include <cstdio>
#include <string>

#include "common/harness.h"
#include "dev/bench/w4a16_probe.cuh"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/stream.h"

using namespace futr;

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  std::string why;
  if (!cuda::probe_device(&why)) {
    std::fprintf(stderr, "w4a16_probe_bench: %s\n", why.c_str());
    return 2;
  }
  try {
    const auto& dev = cuda::require_device();
    cuda::Stream s;
    bench::GraphTimer timer(20);
    const size_t max_bytes = size_t(1) << 30;
    cuda::DeviceBuffer<uint8_t> w(max_bytes);
    cuda::DeviceBuffer<uint16_t> x(4096);
    cuda::DeviceBuffer<uint32_t> sink(1);
    cuda::fill_random(w.get(), cuda::FillType::kU8, max_bytes, 11, 0, 0, s);
    cuda::fill_random(x.get(), cuda::FillType::kBF16, x.size(), 12, -1, 1, s);
    s.sync();
    bench::Report rep("Decode GEMM work added to the floor, " + dev.name,
                      {"bytes", "level", "what", "us", "TB/s", "x floor"});
    const char* names[] = {
        "floor (xor)",          "+ dequant (lop3+fma)",       "+ 4 mma/16 B",
        "+ x from L1",          "biased dequant + 8 mma + x", "3 + scale loads",
        "3 as a register ring", "3 in CTA-contiguous order",  "5 + 6 + 7 (gemv minus epilogue)"};
    for (size_t bytes : {size_t(58720256), max_bytes / 2}) {
      const size_t n16 = bytes / 16;
      double floor_us = 0;
      for (int level = 0; level <= 8; ++level) {
        auto launch = [&](cudaStream_t st) {
          const dim3 grid(unsigned(4 * dev.sm_count));
          const auto* wp = reinterpret_cast<const uint4*>(w.get());
          const auto* xp = reinterpret_cast<const uint4*>(x.get());
          const auto* scp = reinterpret_cast<const uint32_t*>(w.get() + bytes);  // scales after the weights
          switch (level) {
            case 0: bench::w4a16_probe_kernel<0><<<grid, 256, 0, st>>>(wp, n16, xp, sink.get()); break;
            case 1: bench::w4a16_probe_kernel<1><<<grid, 256, 0, st>>>(wp, n16, xp, sink.get()); break;
            case 2: bench::w4a16_probe_kernel<2><<<grid, 256, 0, st>>>(wp, n16, xp, sink.get()); break;
            case 3: bench::w4a16_probe_kernel<3><<<grid, 256, 0, st>>>(wp, n16, xp, sink.get()); break;
            case 4: bench::w4a16_probe_kernel<4><<<grid, 256, 0, st>>>(wp, n16, xp, sink.get()); break;
            case 5:
              bench::w4a16_probe_gemv_kernel<true, false, false>
                  <<<grid, 256, 0, st>>>(wp, n16, xp, scp, sink.get());
              break;
            case 6:
              bench::w4a16_probe_gemv_kernel<false, true, false>
                  <<<grid, 256, 0, st>>>(wp, n16, xp, scp, sink.get());
              break;
            case 7:
              bench::w4a16_probe_gemv_kernel<false, false, true>
                  <<<grid, 256, 0, st>>>(wp, n16, xp, scp, sink.get());
              break;
            default:
              bench::w4a16_probe_gemv_kernel<true, true, true>
                  <<<grid, 256, 0, st>>>(wp, n16, xp, scp, sink.get());
              break;
          }
          FUTR_CUDA_CHECK_LAUNCH();
        };
        const double us = timer.us(launch, s);
        if (level == 0) floor_us = us;
        rep.add({{"bytes", bytes},
                 {"level", level},
                 {"what", names[level]},
                 {"us", us},
                 {"TB/s", double(bytes) / (us * 1e-6) / 1e12},
                 {"x floor", us / floor_us}});
      }
    }
    rep.set_meta("env", bench::environment_json());
    rep.emit(json_path);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "w4a16_probe_bench: %s\n", e.what());
    return 1;
  }
}
