// Synthetic models: the configurations of real Llama shapes (and a tiny one
// for tests) with random weights, for benchmarks where no checkpoint exists
// offline (the kernels' speed does not depend on the weights' values).
//
//   name           hidden layers heads/kv head_dim intermediate vocab  tied
//   tiny              256     2     4 / 2     64        512       512   no
//   smollm2-135m      576    30     9 / 3     64       1536     49152   yes
//   llama-3.2-1b     2048    16    32 / 8     64       8192    128256   yes
//   llama-3.1-8b     4096    32    32 / 8    128      14336    128256   no
//   llama-3.1-70b    8192    80    64 / 8    128      28672    128256   no
//   llama-3.1-405b  16384   126   128 / 8    128      53248    128256   no   (INT4 ~203 GB: --tp)
// (Llama 3.x: rope theta 500000 with llama3 scaling, factor 32 for 3.2 and 8
// for 3.1; trained context 131072; tiny: theta 10000, context 4096;
// smollm2-135m: theta 100000, context 8192, the default model's shapes.)
//
// Where the weights come from:
//   - the GPU engine draws them on the device (gpu::GpuEngine's synthetic
//     constructor: INT4 nibbles, FP16 scales, BF16 norms / embedding / head),
//     so even the 70B (~37 GB in INT4) needs no host buffer;
//   - on the CPU only `tiny` exists (synthetic_host_model(): FP32 on the
//     host, a few MB); the big ones are refused with a message saying why.
//
// Tests: tests/cli/bench_cli_test.cpp (futr bench --synthetic tiny).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace futr {

// {"tiny", "smollm2-135m", "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"}.
std::vector<std::string> synthetic_model_names();

// The configuration of `name`; futr::Error naming the accepted names otherwise.
ModelConfig synthetic_config(const std::string& name);

// A host Model with random FP32 weights (normal, scaled so activations stay
// O(1)) drawn from `seed`: `tiny` only; futr::Error for the others ("builds
// its weights on the GPU only").
Model synthetic_host_model(const std::string& name, uint64_t seed);

}  // namespace futr
