// cuBLASLt baseline wrapper (launch/cublaslt.h) against a CPU reference, BF16
// and E4M3 inputs, on shapes with M not a multiple of the tile.
#include "launch/cublaslt.h"

#include <gtest/gtest.h>

#include <random>

#include "core/numeric.h"
#include "launch/buffer.h"
#include "support/compare.h"
#include "support/gpu.h"
#include "support/tolerances.h"

using namespace futr;

namespace {
void run(cuda::LtInput in, int M, int N, int K) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> a(size_t(M) * K), b(size_t(N) * K);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  std::vector<uint8_t> a8(a.size()), b8(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (in == cuda::LtInput::kBF16) {
      a16[i] = float_to_bf16(u(rng));
      a[i] = bf16_to_float(a16[i]);
    } else {
      a8[i] = float_to_e4m3(u(rng));
      a[i] = e4m3_to_float(a8[i]);
    }
  }
  for (size_t i = 0; i < b.size(); ++i) {
    if (in == cuda::LtInput::kBF16) {
      b16[i] = float_to_bf16(u(rng));
      b[i] = bf16_to_float(b16[i]);
    } else {
      b8[i] = float_to_e4m3(u(rng));
      b[i] = e4m3_to_float(b8[i]);
    }
  }
  const float sa = 0.5f, sb = 0.25f;
  std::vector<float> ref(size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(a[size_t(m) * K + k]) * b[size_t(n) * K + k];
      ref[size_t(m) * N + n] = float(in != cuda::LtInput::kBF16 ? acc * sa * sb : acc);
    }
  cuda::CublasLt lt;
  cuda::DeviceBuffer<uint16_t> c(size_t(M) * N);
  c.fill_bytes(0xff);
  cuda::DeviceBuffer<float> scales(std::vector<float>{sa, sb});
  if (in == cuda::LtInput::kBF16) {
    cuda::DeviceBuffer<uint16_t> da(a16), db(b16);
    lt.matmul(in, da.get(), db.get(), c.get(), M, N, K, nullptr, nullptr, nullptr);
  } else {
    cuda::DeviceBuffer<uint8_t> da(a8), db(b8);
    lt.matmul(in, da.get(), db.get(), c.get(), M, N, K, scales.get(), scales.get() + 1, nullptr);
  }
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out;
  for (uint16_t h : c.download()) out.push_back(bf16_to_float(h));
  const auto st = test::compare(out, ref);
  EXPECT_EQ(st.non_finite, 0u);
  EXPECT_LT(st.rel_l2, test::tol::kBf16Output) << "M=" << M << " N=" << N << " K=" << K;
}
}  // namespace

TEST(CublasLt, Bf16) {
  FUTR_REQUIRE_GPU();
  run(cuda::LtInput::kBF16, 1, 256, 512);
  run(cuda::LtInput::kBF16, 33, 576, 960);
}

TEST(CublasLt, E4M3) {
  FUTR_REQUIRE_GPU();
  run(cuda::LtInput::kE4M3, 16, 256, 512);
  run(cuda::LtInput::kE4M3, 33, 576, 960);
}

TEST(CublasLt, E4M3FastAccumulation) {  // the benchmark's second cuBLASLt mode
  FUTR_REQUIRE_GPU();
  run(cuda::LtInput::kE4M3FastAccum, 16, 256, 512);
  run(cuda::LtInput::kE4M3FastAccum, 33, 576, 960);
}
