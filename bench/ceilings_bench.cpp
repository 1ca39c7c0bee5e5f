// ceilings_bench: the roofline ceilings of this GPU, measured the way every
// other benchmark measures them (bench/common/harness.h).
//   usage: ceilings_bench [--json PATH]
#include <cstdio>
#include <cstring>
#include <string>

#include "common/harness.h"
#include "core/error.h"
#include "launch/device.h"
#include "launch/stream.h"

int main(int argc, char** argv) {
  try {
    std::string json;
    for (int i = 1; i < argc; ++i)
      if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    std::string why;
    if (!futr::cuda::probe_device(&why)) {
      std::fprintf(stderr, "ceilings_bench: %s\n", why.c_str());
      return 2;
    }
    futr::cuda::Stream s;
    const auto c = futr::bench::measure_ceilings(s);
    futr::bench::Report r("Ceilings", {"what", "measured", "unit"});
    r.add({{"what", "device-to-device copy (read + write)"}, {"measured", c.copy_gbs}, {"unit", "GB/s"}});
    r.add({{"what", "cuBLASLt BF16 8192^3"}, {"measured", c.bf16_tflops}, {"unit", "TFLOP/s"}});
    r.add({{"what", "cuBLASLt FP8 E4M3 8192^3"}, {"measured", c.fp8_tflops}, {"unit", "TFLOP/s"}});
    r.emit(json);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ceilings_bench: %s\n", e.what());
    return 1;
  }
}
