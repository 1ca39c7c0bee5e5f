// The harness of the decode GEMM tests (tests/kernels/w4a16_test.cpp and
// dev/tests/w4a16_dev_test.cpp): a layer with device-drawn weights, one launch
// against the CPU reference (src/reference/w4a16_ref.h) on a sample of its
// tile groups with poisoned outputs, and the largest error per kernel family
// (printed at the end of the run).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/fill.h"
#include "launch/linear.h"
#include "launch/w4a16.h"
#include "launch/w4a16_shapes.h"
#include "quant/int4_pack.h"
#include "reference/w4a16_ref.h"
#include "support/compare.h"
#include "support/random.h"

namespace futr::test::w4a16 {

using cuda::DecodeConfig;
using cuda::DecodeShape;
using test::rng;

// Largest relative error seen per family (printed by the environment below).
inline std::map<std::string, double>& worst() {
  static std::map<std::string, double> w;
  return w;
}

inline std::vector<int> sample_tiles(int ntiles, int count) {
  std::set<int> t{0, ntiles - 1};
  std::uniform_int_distribution<int> u(0, ntiles - 1);
  while (int(t.size()) < std::min(count, ntiles)) t.insert(u(rng()));
  return {t.begin(), t.end()};
}

inline std::vector<uint16_t> random_x(int m, int k) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> x(size_t(m) * k);
  for (auto& v : x) v = float_to_bf16(u(rng()));
  return x;
}

// A quantized layer with device-drawn weights and the logical weights of a
// sample of its tiles on the host.
struct Layer {
  std::unique_ptr<cuda::QuantLinear> lin;
  std::vector<int> tiles;     // sampled 16-channel tiles (whole groups of 8)
  quant::Int4Weights sub4;    // INT4: logical weights of the sampled tiles' rows
  std::vector<uint8_t> sub8;  // E4M3: [rows, K] logical bytes of the sampled rows
  std::vector<float> sc8;     // E4M3: their scales
};

inline Layer make_layer(bool int4, int n, int k, int group, int sample = 3) {
  Layer L;
  const uint64_t seed = rng()();
  if (int4) {
    auto lin = std::make_unique<cuda::W4Linear>(n, k, group);
    cuda::fill_random(lin->weights(), cuda::FillType::kU8, size_t(n) * k / 2, seed, 0, 0, nullptr);
    cuda::fill_random(lin->scales(), cuda::FillType::kF16, size_t(n) * (k / group), seed + 1, 0.002f, 0.02f,
                      nullptr);
    L.lin = std::move(lin);
  } else {
    auto lin = std::make_unique<cuda::W8Linear>(n, k);
    cuda::fill_random(lin->weights(), cuda::FillType::kE4M3, size_t(n) * k, seed, -2.0f, 2.0f, nullptr);
    cuda::fill_random(lin->scales(), cuda::FillType::kF32, size_t(n), seed + 1, 0.005f, 0.02f, nullptr);
    L.lin = std::move(lin);
  }
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  // Sample whole tile groups (8 tiles, interleaved chunk by chunk; the last may
  // be partial): a group is a contiguous run, and groups in order (a partial one
  // last) form a valid packed matrix of their own.
  const int ntiles = n / 16, ngroups = (ntiles + 7) / 8;
  const std::vector<int> groups = sample_tiles(ngroups, sample);  // sorted, first and last included
  for (int gi : groups)
    for (int t = 8 * gi; t < std::min(ntiles, 8 * gi + 8); ++t) L.tiles.push_back(t);
  const size_t rows = L.tiles.size() * 16;
  if (int4) {
    const size_t tile_bytes = size_t(k) / 2 * 16, tile_scales = size_t(k / group) * 16;
    quant::Int4Packed p{int(rows), k, group, std::vector<uint8_t>(rows * k / 2),
                        std::vector<uint16_t>(rows * (k / group))};
    const auto* sc = static_cast<const uint16_t*>(L.lin->scales());
    size_t off = 0;
    for (int gi : groups) {
      const int gt = std::min(ntiles - 8 * gi, 8);
      FUTR_CUDA_CHECK(cudaMemcpy(p.weights.data() + off * tile_bytes,
                                 L.lin->weights() + size_t(8 * gi) * tile_bytes, gt * tile_bytes,
                                 cudaMemcpyDeviceToHost));
      FUTR_CUDA_CHECK(cudaMemcpy(p.scales.data() + off * tile_scales, sc + size_t(8 * gi) * tile_scales,
                                 gt * tile_scales * 2, cudaMemcpyDeviceToHost));
      off += gt;
    }
    L.sub4 = quant::unpack_int4(p);
  } else {
    const size_t tile_bytes = size_t(k) * 16;
    std::vector<uint8_t> packed(rows * k);
    L.sc8.resize(rows);
    const auto* sc = static_cast<const float*>(L.lin->scales());
    size_t off = 0;
    for (int gi : groups) {
      const int gt = std::min(ntiles - 8 * gi, 8);
      FUTR_CUDA_CHECK(cudaMemcpy(packed.data() + off * tile_bytes,
                                 L.lin->weights() + size_t(8 * gi) * tile_bytes, gt * tile_bytes,
                                 cudaMemcpyDeviceToHost));
      FUTR_CUDA_CHECK(
          cudaMemcpy(L.sc8.data() + off * 16, sc + size_t(8 * gi) * 16, gt * 64, cudaMemcpyDeviceToHost));
      off += gt;
    }
    L.sub8 = quant::unpack_e4m3(int(rows), k, packed);
  }
  return L;
}

// One launch on fresh x, poisoned y; returns the relative error on the sample.
inline double check(Layer& L, int m, const DecodeConfig* cfg, const std::string& what, double tol) {
  const int n = L.lin->n(), k = L.lin->k();
  const auto x = random_x(m, k);
  cuda::DeviceBuffer<uint16_t> dx(x), dy(size_t(m) * n);
  dy.fill_bytes(0xff);
  if (cfg) {
    L.lin->reserve(*cfg, m);
    L.lin->forward(dx.get(), dy.get(), m, *cfg, nullptr);
  } else {
    L.lin->forward(dx.get(), dy.get(), m, nullptr);
  }
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  const auto y = dy.download();
  const size_t rows = L.tiles.size() * 16;
  std::vector<float> ref(size_t(m) * rows);
  if (L.lin->format() == cuda::DecodeWeights::kInt4) ref::w4a16(L.sub4, x, m, ref);
  else ref::w8a16(int(rows), k, L.sub8, L.sc8, x, m, ref);
  std::vector<float> out(ref.size());
  size_t non_finite = 0;
  for (uint16_t h : y) non_finite += !std::isfinite(bf16_to_float(h));
  for (int i = 0; i < m; ++i)
    for (size_t t = 0; t < L.tiles.size(); ++t)
      for (int ch = 0; ch < 16; ++ch)
        out[size_t(i) * rows + t * 16 + ch] = bf16_to_float(y[size_t(i) * n + size_t(L.tiles[t]) * 16 + ch]);
  const auto st = test::compare(out, ref);
  const std::string conf = cuda::describe(cfg ? *cfg : L.lin->config(m));
  EXPECT_EQ(non_finite, 0u) << what << " M=" << m << " " << conf << ": unwritten or non-finite outputs";
  EXPECT_LT(st.rel_l2, tol) << what << " M=" << m << " " << conf;
  double& w = worst()[(L.lin->format() == cuda::DecodeWeights::kInt4 ? "int4 " : "e4m3 ") +
                      std::string(conf.substr(0, conf.find(' ')))];
  w = std::max(w, st.rel_l2);
  return st.rel_l2;
}

inline std::string name(const DecodeShape& s) { return std::string(s.model) + " " + s.proj; }

class PrintWorst : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [k, v] : worst()) std::printf("largest relative L2 error, %s: %.3g\n", k.c_str(), v);
  }
};
inline const auto* const kPrintWorst = ::testing::AddGlobalTestEnvironment(new PrintWorst);

}  // namespace futr::test::w4a16
