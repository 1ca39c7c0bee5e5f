// The logits reductions (src/launch/decode_ops.h logits_reduce,
// src/kernels/sm90_logits_reduce.cuh) against ref::logits_reduce
// (src/reference/logits_reduce_ref.h), which also agrees with the host sampler's
// runtime::argmax and perplexity's runtime::token_nll on finite rows (checked
// here too, without a GPU).
//
// Rows: fresh random non-zero logits every run, vocabularies that are and are
// not multiples of the block (1, 7, 1023, 1024, 1025, 49152, 128256), a row
// stride wider than the vocabulary, exact ties of the maximum (the lowest id
// must win), -inf entries (masked ids; a target on one gives -inf), rows that
// are all -inf, NaN and +inf entries (counted; NaN never wins the argmax).
// The output is poisoned (0xff) before each launch. argmax, nonfinite: exact;
// lse and logprob: |gpu - ref| <= tol::kLogitsReduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "launch/buffer.h"
#include "launch/decode_ops.h"
#include "launch/stream.h"
#include "reference/logits_reduce_ref.h"
#include "runtime/perplexity.h"
#include "runtime/sampler.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerances.h"

using namespace futr;

namespace {

using test::rng;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class Kind { kRandom, kTies, kNegInf, kAllNegInf, kNaN, kLargeRange };

// A row of `vocab` logits of the given kind.
std::vector<float> make_row(int vocab, Kind kind) {
  std::normal_distribution<float> n(0.f, kind == Kind::kLargeRange ? 30.f : 3.f);
  std::uniform_int_distribution<int> id(0, vocab - 1);
  std::vector<float> z(static_cast<size_t>(vocab));
  for (float& v : z) {
    v = n(rng());
    if (v == 0.f) v = 0.5f;  // non-zero
  }
  switch (kind) {
    case Kind::kRandom:
    case Kind::kLargeRange: break;
    case Kind::kTies: {
      const float top = *std::max_element(z.begin(), z.end()) + 1.f;
      for (int k = 0; k < 4; ++k) z[size_t(id(rng()))] = top;  // up to 4 ties of the maximum
      break;
    }
    case Kind::kNegInf:
      for (int k = 0; k < vocab / 3; ++k) z[size_t(id(rng()))] = kNegInf;
      z[size_t(id(rng()))] = 2.f;  // at least one finite
      break;
    case Kind::kAllNegInf: std::fill(z.begin(), z.end(), kNegInf); break;
    case Kind::kNaN:
      z[size_t(id(rng()))] = std::numeric_limits<float>::quiet_NaN();
      if (vocab > 3) z[size_t(id(rng()))] = std::numeric_limits<float>::infinity();
      break;
  }
  return z;
}

TEST(LogitsReduceRef, AgreesWithTheHostSamplerAndPerplexity) {
  for (int vocab : {1, 7, 1000, 49152}) {
    for (Kind k : {Kind::kRandom, Kind::kTies, Kind::kNegInf, Kind::kLargeRange}) {
      const std::vector<float> z = make_row(vocab, k);
      const int t = int(rng()() % uint64_t(vocab));
      const ref::LogitsStats s = ref::logits_reduce(z, t);
      EXPECT_EQ(s.argmax, runtime::argmax(z));
      EXPECT_EQ(s.nonfinite, 0);
      if (z[size_t(t)] != kNegInf) {
        EXPECT_NEAR(s.logprob, -runtime::token_nll(z, t), 1e-12 * (1 + std::fabs(s.logprob)));
      }
    }
  }
  const std::vector<float> ties = {1.f, 3.f, 2.f, 3.f, 3.f};
  EXPECT_EQ(ref::logits_reduce(ties, -1).argmax, 1);
  const std::vector<float> masked(5, kNegInf);
  EXPECT_EQ(ref::logits_reduce(masked, 2).lse, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(ref::logits_reduce(masked, 2).argmax, 0);
}

TEST(LogitsReduceArgs, RefusesBadArguments) {
  cuda::LogitsReduceArgs a;
  a.vocab = 0;
  a.rows = 1;
  EXPECT_FUTR_ERROR(cuda::logits_reduce(a, nullptr), "vocab");
  a.vocab = 10;
  a.ld = 5;
  EXPECT_FUTR_ERROR(cuda::logits_reduce(a, nullptr), "row stride");
  a.ld = 0;
  EXPECT_FUTR_ERROR(cuda::logits_reduce(a, nullptr), "null");
}

void run_case(int vocab, int rows, int64_t ld, bool with_targets) {
  std::vector<float> host(size_t(rows) * size_t(ld), 7.f);  // the stride's gap holds junk
  std::vector<int> targets(size_t(rows), -1);
  const Kind kinds[] = {Kind::kRandom,    Kind::kTies, Kind::kNegInf,
                        Kind::kAllNegInf, Kind::kNaN,  Kind::kLargeRange};
  std::vector<Kind> kind(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    kind[size_t(r)] = kinds[size_t(r) % 6];
    const std::vector<float> z = make_row(vocab, kind[size_t(r)]);
    std::memcpy(host.data() + size_t(r) * size_t(ld), z.data(), z.size() * sizeof(float));
    if (with_targets && r % 4 != 3) {
      targets[size_t(r)] = int(rng()() % uint64_t(vocab));
      if (r % 5 == 2) {  // a target on a -inf entry where the row has one
        for (int i = 0; i < vocab; ++i)
          if (z[size_t(i)] == kNegInf) {
            targets[size_t(r)] = i;
            break;
          }
      }
    }
  }
  cuda::Stream st;
  cuda::DeviceBuffer<float> d_z(host);
  cuda::DeviceBuffer<int> d_t(targets);
  cuda::DeviceBuffer<cuda::LogitsRowStats> d_out(static_cast<size_t>(rows));
  d_out.fill_bytes(0xff);
  cuda::LogitsReduceArgs a;
  a.logits = d_z.get();
  a.ld = ld;
  a.vocab = vocab;
  a.rows = rows;
  a.targets = with_targets ? d_t.get() : nullptr;
  a.out = d_out.get();
  cuda::logits_reduce(a, st);
  const std::vector<cuda::LogitsRowStats> got = d_out.download(st);
  for (int r = 0; r < rows; ++r) {
    const std::span<const float> z(host.data() + size_t(r) * size_t(ld), size_t(vocab));
    const ref::LogitsStats want = ref::logits_reduce(z, with_targets ? targets[size_t(r)] : -1);
    const cuda::LogitsRowStats& g = got[size_t(r)];
    const std::string what = "vocab " + std::to_string(vocab) + " row " + std::to_string(r) + " kind " +
                             std::to_string(int(kind[size_t(r)]));
    EXPECT_EQ(g.argmax, want.argmax) << what;
    EXPECT_EQ(g.nonfinite, want.nonfinite) << what;
    EXPECT_TRUE(g.max == want.max || (std::isnan(g.max) && std::isnan(want.max))) << what;
    auto close = [&](double x, double y) {
      if (std::isnan(y)) return std::isnan(x);
      if (std::isinf(y)) return x == y;
      return std::fabs(x - y) <= test::tol::kLogitsReduce;
    };
    if (want.nonfinite == 0) {
      EXPECT_TRUE(close(g.lse, want.lse)) << what << ": lse " << g.lse << " vs " << want.lse;
      EXPECT_TRUE(close(g.logprob, want.logprob))
          << what << ": logprob " << g.logprob << " vs " << want.logprob;
    }
  }
}

TEST(LogitsReduce, MatchesTheReference) {
  FUTR_REQUIRE_GPU();
  for (int vocab : {1, 7, 1023, 1024, 1025, 4099, 49152, 128256})
    for (int rows : {1, 6, 32}) {
      run_case(vocab, rows, vocab, true);
      run_case(vocab, rows, vocab, false);
    }
  run_case(1000, 12, 1024 + 3, true);  // a row stride wider than the vocabulary
}

}  // namespace
