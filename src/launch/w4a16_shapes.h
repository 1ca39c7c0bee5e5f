// The decode GEMM shapes of the supported models: each model's four projections per
// layer (y = x W^T, W [N, K]) with gate and up fused into one N = 2 * intermediate
// matrix. Shared by tests/kernels/w4a16_test.cpp and bench/w4a16_bench.cpp.
#pragma once

#include <array>

namespace futr::cuda {

struct DecodeShape {
  const char* model;  // "Llama-3.1-8B", ...
  const char* proj;   // "qkv", "o", "gate_up", "down"
  int n;              // output channels N
  int k;              // inputs K
  int group;          // INT4 group size: 128, or 64 where K % 128 != 0
};

inline constexpr std::array<DecodeShape, 20> kDecodeShapes{{
    // SmolLM2-135M: hidden 576, 9/3 heads of 64, intermediate 1536 (K = 576: group 64).
    {"SmolLM2-135M", "qkv", 960, 576, 64},
    {"SmolLM2-135M", "o", 576, 576, 64},
    {"SmolLM2-135M", "gate_up", 3072, 576, 64},
    {"SmolLM2-135M", "down", 576, 1536, 64},
    // Llama-3.2-1B: hidden 2048, 32/8 heads of 64, intermediate 8192.
    {"Llama-3.2-1B", "qkv", 3072, 2048, 128},
    {"Llama-3.2-1B", "o", 2048, 2048, 128},
    {"Llama-3.2-1B", "gate_up", 16384, 2048, 128},
    {"Llama-3.2-1B", "down", 2048, 8192, 128},
    // Llama-3.1-8B: hidden 4096, 32/8 heads of 128, intermediate 14336.
    {"Llama-3.1-8B", "qkv", 6144, 4096, 128},
    {"Llama-3.1-8B", "o", 4096, 4096, 128},
    {"Llama-3.1-8B", "gate_up", 28672, 4096, 128},
    {"Llama-3.1-8B", "down", 4096, 14336, 128},
    // Llama-3.1-70B: hidden 8192, 64/8 heads of 128, intermediate 28672.
    {"Llama-3.1-70B", "qkv", 10240, 8192, 128},
    {"Llama-3.1-70B", "o", 8192, 8192, 128},
    {"Llama-3.1-70B", "gate_up", 57344, 8192, 128},
    {"Llama-3.1-70B", "down", 8192, 28672, 128},
    // Llama-3.1-405B: hidden 16384, 128/8 heads of 128, intermediate 53248.
    {"Llama-3.1-405B", "qkv", 18432, 16384, 128},
    {"Llama-3.1-405B", "o", 16384, 16384, 128},
    {"Llama-3.1-405B", "gate_up", 106496, 16384, 128},
    {"Llama-3.1-405B", "down", 16384, 53248, 128},
}};

}  // namespace futr::cuda
