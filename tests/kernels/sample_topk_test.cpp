// The GPU sampler (src/launch/decode_ops.h sample_topk,
// src/kernels/sm90_sample_topk.cuh) against its reference, the host
// sampler itself (runtime::Sampler::sample_with: the same rule, the same u).
//
// Rows: fresh random logits every run over vocabularies of 1..128256 ids, a row
// stride wider than the drawable ids (the padded LM head), coarse values with
// many exact ties (ties at the k-th logit must keep the lower ids), -inf
// entries (masked ids), rows whose top k reach -inf; configurations over
// temperature, top_k 1..1024 (and k above the vocabulary), min-p and top-p;
// u uniform, plus u at 0 and just below 1. Tokens must be equal (they could
// differ only where the GPU's exp and the host's differ in the last bit and u
// falls within that of a cumulative boundary; the test reports any such row).
// Also: a row with top_k 0 is left alone (-1), an all -inf row gives -2, and
// Sampler::engine_drawable / sample_with / next_uniform agree with sample().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_ops.h"
#include "launch/stream.h"
#include "runtime/sampler.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/random.h"

using namespace futr;

namespace {

using test::rng;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class Kind { kRandom, kCoarseTies, kNegInf, kMostlyNegInf };

std::vector<float> make_row(int n, Kind kind) {
  std::normal_distribution<float> g(0.f, 3.f);
  std::uniform_int_distribution<int> id(0, n - 1);
  std::vector<float> z(static_cast<size_t>(n));
  for (float& v : z) v = g(rng());
  if (kind == Kind::kCoarseTies)
    for (float& v : z) v = std::round(v * 2.f) / 2.f;  // ~30 distinct values: ties everywhere
  if (kind == Kind::kNegInf)
    for (int k = 0; k < n / 3; ++k) z[size_t(id(rng()))] = kNegInf;
  if (kind == Kind::kMostlyNegInf) {  // fewer finite ids than top_k
    std::fill(z.begin(), z.end(), kNegInf);
    for (int k = 0; k < std::min(n, 5); ++k) z[size_t(id(rng()))] = g(rng());
  }
  return z;
}

runtime::SamplerConfig random_config() {
  runtime::SamplerConfig c;
  const float temps[] = {0.2f, 0.7f, 1.0f, 1.6f};
  const int ks[] = {1, 2, 5, 40, 100, 1024};
  const float ps[] = {1.0f, 0.95f, 0.8f, 0.3f};
  const float mins[] = {0.0f, 0.0f, 0.05f, 0.2f};
  c.temperature = temps[rng()() % 4];
  c.top_k = ks[rng()() % 6];
  c.top_p = ps[rng()() % 4];
  c.min_p = mins[rng()() % 4];
  return c;
}

TEST(SamplerHost, EngineDrawsEqualSample) {
  // next_uniform + sample_with reproduce sample() draw for draw.
  const std::vector<float> z = make_row(1000, Kind::kRandom);
  runtime::SamplerConfig c;
  c.temperature = 0.9f, c.top_k = 50, c.top_p = 0.9f, c.seed = 1234;
  runtime::Sampler a(c), b(c);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(a.sample(z), b.sample_with(z, b.next_uniform())) << "draw " << i;
  EXPECT_TRUE(a.engine_drawable(1024));
  c.top_k = 0;
  EXPECT_FALSE(runtime::Sampler(c).engine_drawable(1024));  // no top-k cut: the host's
  c.top_k = 2000;
  EXPECT_FALSE(runtime::Sampler(c).engine_drawable(1024));
  c.top_k = 40, c.temperature = 0.f;
  EXPECT_FALSE(runtime::Sampler(c).engine_drawable(1024));  // greedy: the argmax path
  c.temperature = 1.f, c.repetition_penalty = 1.3f;
  runtime::Sampler pen(c);
  EXPECT_TRUE(pen.engine_drawable(1024));  // no history yet: no penalty applies
  pen.accept(3, false);
  EXPECT_FALSE(pen.engine_drawable(1024));
  EXPECT_FUTR_ERROR(a.sample_with(z, 1.0), "uniform");
}

TEST(SampleTopkArgs, RefusesBadArguments) {
  cuda::SampleArgs a;
  a.vocab = 0;
  a.rows = 1;
  EXPECT_FUTR_ERROR(cuda::sample_topk(a, nullptr), "vocab");
  a.vocab = 10;
  a.ld = 5;
  EXPECT_FUTR_ERROR(cuda::sample_topk(a, nullptr), "row stride");
  a.ld = 0;
  EXPECT_FUTR_ERROR(cuda::sample_topk(a, nullptr), "null");
}

// rows rows of `vocab` drawable ids in a stride of ld; returns mismatches.
int run_case(int vocab, int64_t ld, int rows) {
  const Kind kinds[] = {Kind::kRandom, Kind::kCoarseTies, Kind::kNegInf, Kind::kMostlyNegInf};
  std::vector<float> host(size_t(rows) * size_t(ld), 1e30f);  // the padding beats every logit: never drawn
  std::vector<cuda::SampleRow> samp(static_cast<size_t>(rows));
  std::vector<runtime::SamplerConfig> cfg(static_cast<size_t>(rows));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> z = make_row(vocab, kinds[r % 4]);
    std::memcpy(host.data() + size_t(r) * size_t(ld), z.data(), z.size() * sizeof(float));
    cfg[size_t(r)] = random_config();
    cuda::SampleRow& s = samp[size_t(r)];
    s.u = r % 7 == 5 ? 0.0 : (r % 7 == 6 ? std::nextafter(1.0, 0.0) : u01(rng()));
    s.temperature = cfg[size_t(r)].temperature, s.top_k = cfg[size_t(r)].top_k;
    s.top_p = cfg[size_t(r)].top_p, s.min_p = cfg[size_t(r)].min_p;
    if (r % 11 == 10) s.top_k = 0;  // not sampled here
  }
  cuda::Stream st;
  cuda::DeviceBuffer<float> d_z(host);
  cuda::DeviceBuffer<cuda::SampleRow> d_s(samp);
  cuda::DeviceBuffer<int> d_out(static_cast<size_t>(rows));
  d_out.fill_bytes(0x7f);
  cuda::SampleArgs a;
  a.logits = d_z.get();
  a.ld = ld;
  a.vocab = vocab;
  a.rows = rows;
  a.samplers = d_s.get();
  a.out = d_out.get();
  cuda::sample_topk(a, st.get());
  FUTR_CUDA_CHECK(cudaStreamSynchronize(st.get()));
  const std::vector<int> got = d_out.download();
  int mismatches = 0;
  for (int r = 0; r < rows; ++r) {
    const cuda::SampleRow& s = samp[size_t(r)];
    if (s.top_k == 0) {
      EXPECT_EQ(got[size_t(r)], -1) << "row " << r;
      continue;
    }
    runtime::Sampler ref(cfg[size_t(r)]);
    ref.limit_vocab(vocab);
    const std::span<const float> z(host.data() + size_t(r) * size_t(ld), size_t(vocab));
    const int want = ref.sample_with(z, s.u);
    if (got[size_t(r)] != want) {
      ++mismatches;
      ADD_FAILURE() << "vocab " << vocab << " row " << r << " (T " << s.temperature << ", k " << s.top_k
                    << ", p " << s.top_p << ", min-p " << s.min_p << ", u " << s.u << "): gpu "
                    << got[size_t(r)] << ", host " << want;
    }
  }
  return mismatches;
}

TEST(SampleTopk, EqualsTheHostSampler) {
  FUTR_REQUIRE_GPU();
  for (auto [vocab, ld, rows] : {std::tuple{1, 1, 8},
                                 {7, 9, 32},
                                 {1000, 1000, 64},
                                 {1025, 1100, 64},
                                 {49152, 49152, 96},
                                 {49152, 49280, 32},
                                 {128256, 128256, 32}})
    EXPECT_EQ(run_case(vocab, ld, rows), 0) << "vocab " << vocab;
}

TEST(SampleTopk, AllNegInfIsRefusedAndRowsAreIndependent) {
  FUTR_REQUIRE_GPU();
  const int vocab = 300;
  std::vector<float> host(size_t(2) * vocab, kNegInf);
  for (int i = 0; i < vocab; ++i) host[size_t(vocab + i)] = float(i % 17);  // row 1: finite, ties
  std::vector<cuda::SampleRow> samp(2);
  samp[0].top_k = samp[1].top_k = 40;
  samp[0].u = samp[1].u = 0.5;
  cuda::DeviceBuffer<float> d_z(host);
  cuda::DeviceBuffer<cuda::SampleRow> d_s(samp);
  cuda::DeviceBuffer<int> d_out(2);
  cuda::SampleArgs a;
  a.logits = d_z.get(), a.vocab = vocab, a.rows = 2, a.samplers = d_s.get(), a.out = d_out.get();
  cuda::sample_topk(a, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int> got = d_out.download();
  EXPECT_EQ(got[0], -2);
  runtime::SamplerConfig c;
  c.temperature = 1.f, c.top_k = 40, c.top_p = 1.f;
  EXPECT_EQ(got[1], runtime::Sampler(c).sample_with({host.data() + vocab, size_t(vocab)}, 0.5));
}

}  // namespace
