// The coarsened KL tool (src/quant/kl.h) against brute force on small
// vocabularies: exact when k covers the vocabulary, a lower bound of the true
// KL otherwise and equal to the brute-force KL of the coarsened
// distributions; top-1 agreement; NLL deltas; the base file round trip and
// broken files.
#include "quant/kl.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "quant/quant_test_util.h"

using namespace futr;
using namespace futr::quant;

namespace {

std::vector<double> softmax(const std::vector<float>& z) {
  double mx = -1e300;
  for (float v : z) mx = std::max(mx, double(v));
  std::vector<double> p(z.size());
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += (p[i] = std::exp(double(z[i]) - mx));
  for (double& v : p) v /= s;
  return p;
}

double brute_kl(const std::vector<float>& zp, const std::vector<float>& zq) {
  const auto p = softmax(zp), q = softmax(zq);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) kl += p[i] * std::log(p[i] / q[i]);
  return kl;
}

// KL of the distributions coarsened to {top-k of p} + rest, by brute force.
double brute_coarse_kl(const std::vector<float>& zp, const std::vector<float>& zq, int k) {
  const auto p = softmax(zp), q = softmax(zq);
  std::vector<size_t> idx(p.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  double kl = 0, pr = 0, qr = 0;
  for (size_t j = 0; j < idx.size(); ++j) {
    if (int(j) < k) kl += p[idx[j]] * std::log(p[idx[j]] / q[idx[j]]);
    else {
      pr += p[idx[j]];
      qr += q[idx[j]];
    }
  }
  if (pr > 0) kl += pr * std::log(pr / qr);
  return kl;
}

std::filesystem::path tmp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("futr_kl_test_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace

TEST(Kl, MatchesBruteForce) {
  auto& rng = test::test_rng();
  for (int V : {5, 37, 400})
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> zp = test::randn(size_t(V), 3.0f, rng);
      std::vector<float> zq = zp;
      for (float& v : zq) v += test::randn(1, 0.5f, rng)[0];
      const int target = trial % V;
      // k = V: the exact KL.
      const KlEntry full = make_kl_entry(zp, target, V);
      EXPECT_NEAR(compare_kl_row(full, zq).kl, brute_kl(zp, zq), 1e-6 * (1 + brute_kl(zp, zq)));
      // k < V: the coarsened KL, a lower bound.
      for (int k : {1, 3}) {
        if (k >= V) continue;
        const KlEntry e = make_kl_entry(zp, target, k);
        const double c = compare_kl_row(e, zq).kl;
        EXPECT_NEAR(c, brute_coarse_kl(zp, zq, k), 1e-6 * (1 + c));
        // A lower bound up to the float rounding of the stored log p (see
        // IdenticalDistributionsGiveZero): same slack as the equality above.
        EXPECT_LE(c, brute_kl(zp, zq) + 1e-6 * (1 + c));
      }
      const KlRow r = compare_kl_row(full, zq);
      EXPECT_NEAR(r.nll, -std::log(softmax(zq)[size_t(target)]), 1e-6);
      EXPECT_NEAR(full.nll, -std::log(softmax(zp)[size_t(target)]), 1e-5);
      const size_t ap = size_t(std::max_element(zp.begin(), zp.end()) - zp.begin());
      const size_t aq = size_t(std::max_element(zq.begin(), zq.end()) - zq.begin());
      EXPECT_EQ(r.top1, ap == aq);
      EXPECT_EQ(full.ids[0], int32_t(ap));
    }
}

TEST(Kl, IdenticalDistributionsGiveZero) {
  auto& rng = test::test_rng();
  const std::vector<float> z = test::randn(1000, 4.0f, rng);
  const KlEntry e = make_kl_entry(z, 3, 32);
  const KlRow r = compare_kl_row(e, z);
  // The base stores log p as float (the .klb format is 4 bytes per value), so
  // each term p_i (lp_i - lq_i) carries |lp_i| * 2^-24 of rounding: the KL of
  // identical distributions is zero up to sum_i p_i |lp_i| 2^-24 (plus the
  // same for the "rest" bucket), not up to a fixed 1e-9. Bound it explicitly.
  double bound = 0.0;
  for (size_t i = 0; i < e.logp.size(); ++i)
    bound += std::exp(double(e.logp[i])) * std::abs(double(e.logp[i])) * 0x1p-23;
  if (std::isfinite(e.log_rest))
    bound += std::exp(double(e.log_rest)) * std::abs(double(e.log_rest)) * 0x1p-23;
  EXPECT_GE(r.kl, 0.0);
  EXPECT_LE(r.kl, bound + 1e-12);
  EXPECT_TRUE(r.top1);
}

TEST(Kl, FileRoundTripAndCompare) {
  auto& rng = test::test_rng();
  const int V = 300, rows = 50, k = 8;
  std::vector<float> base = test::randn(size_t(rows) * V, 2.0f, rng), other = base;
  for (float& v : other) v += test::randn(1, 0.3f, rng)[0];
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) targets[size_t(i)] = (i * 7) % V;
  KlBase b(k, V);
  b.add_rows(base.data(), 20, V, targets.data());
  b.add_rows(base.data() + 20 * V, rows - 20, V, targets.data() + 20);
  const auto path = tmp("base.klb");
  b.write(path.string(), {{"ctx", 64}});
  const KlBase r = KlBase::read(path.string());
  ASSERT_EQ(r.size(), rows);
  EXPECT_EQ(r.k(), k);
  EXPECT_EQ(r.meta()["ctx"], 64);
  for (int i = 0; i < rows; ++i) {
    EXPECT_EQ(r.entry(i).ids, b.entry(i).ids);
    EXPECT_EQ(r.entry(i).logp, b.entry(i).logp);
    EXPECT_EQ(r.entry(i).target, targets[size_t(i)]);
  }
  KlCompare c(r);
  c.add_rows(other.data(), rows, V, targets.data());
  double kl = 0, d = 0;
  int top1 = 0;
  for (int i = 0; i < rows; ++i) {
    const std::vector<float> zp(base.begin() + i * V, base.begin() + (i + 1) * V);
    const std::vector<float> zq(other.begin() + i * V, other.begin() + (i + 1) * V);
    kl += brute_coarse_kl(zp, zq, k);
    d += -std::log(softmax(zq)[size_t(targets[size_t(i)])]) +
         std::log(softmax(zp)[size_t(targets[size_t(i)])]);
    top1 += std::max_element(zp.begin(), zp.end()) - zp.begin() ==
            std::max_element(zq.begin(), zq.end()) - zq.begin();
  }
  EXPECT_NEAR(c.mean_kl(), kl / rows, 1e-6);
  EXPECT_NEAR(c.mean_nll_delta(), d / rows, 1e-5);
  EXPECT_DOUBLE_EQ(c.top1(), double(top1) / rows);
  EXPECT_GT(c.kl_stderr(), 0.0);
  // A different text: the targets disagree.
  KlCompare c2(r);
  std::vector<int32_t> wrong = targets;
  wrong[3] += 1;
  EXPECT_FUTR_ERROR(c2.add_rows(other.data(), rows, V, wrong.data()), "another text or window plan");
  KlCompare c3(r);
  c3.add_rows(other.data(), rows, V, targets.data());
  EXPECT_FUTR_ERROR(c3.add_rows(other.data(), 1, V, targets.data()), "more tokens than the base file");

  // Broken files.
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto write = [&](const std::string& s) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(s.data(), std::streamsize(s.size()));
  };
  write(bytes.substr(0, bytes.size() - 3));
  EXPECT_FUTR_ERROR(KlBase::read(path.string()), "sizes do not add up");
  std::string bad = bytes;
  bad[0] = 'X';
  write(bad);
  EXPECT_FUTR_ERROR(KlBase::read(path.string()), "not a KL base file");
  bad = bytes;
  bad[8] = 9;
  write(bad);
  EXPECT_FUTR_ERROR(KlBase::read(path.string()), "KL base version 9");
  bad = bytes;
  bad[12] = 0;  // k = 0
  write(bad);
  EXPECT_FUTR_ERROR(KlBase::read(path.string()), "impossible");
  write(bytes.substr(0, 10));
  EXPECT_FUTR_ERROR(KlBase::read(path.string()), "truncated KL base header");
  std::filesystem::remove(path);
}

// The metadata is parsed by the one JSON entry point (core/json.h): nesting,
// duplicate keys and size are refused naming the file; the fields futr
// perplexity --kl-base compares must be integers; a length beyond the cap is
// refused before anything of it is allocated.
TEST(Kl, MetadataGoesThroughTheJsonEntryPoint) {
  const int V = 40, k = 4;
  std::vector<float> z(size_t(V), 0.5f);
  const int32_t target = 3;
  KlBase b(k, V);
  b.add_rows(z.data(), 1, V, &target);
  const auto path = tmp("meta.klb");
  b.write(path.string(), {{"ctx", 64}});
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t json_bytes = 0;
  std::memcpy(&json_bytes, bytes.data() + 32, 8);
  auto with_meta = [&](const std::string& js, uint64_t declared) {
    std::string s = bytes.substr(0, 40) + js + bytes.substr(40 + size_t(json_bytes));
    std::memcpy(s.data() + 32, &declared, 8);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(s.data(), std::streamsize(s.size()));
  };
  const std::string p = path.string();
  const struct {
    std::string js;
    std::string error;
  } cases[] = {
      {"{\"ctx\": 64, \"ctx\": 128}", p + ": KL base metadata: duplicate key 'ctx'"},
      {"{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
       p + ": KL base metadata: JSON nested deeper than 64 levels"},
      {"{\"ctx\": 64", p + ": KL base metadata: not valid JSON"},
      {"[64]", p + ": KL base metadata is not a JSON object"},
      {"{\"ctx\": \"64\"}", p + ": KL base metadata ctx must be an integer"},
      {"{\"stride\": 1e300}", p + ": KL base metadata stride = 1e+300 is not an integer"},
      {"{\"tokens\": -5}", p + ": KL base metadata tokens = -5 is out of range"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.error);
    with_meta(c.js, c.js.size());
    EXPECT_FUTR_ERROR(KlBase::read(p), c.error);
  }
  // A declared length of 2 MiB in a file that holds it: refused by the cap.
  with_meta("{\"pad\": \"" + std::string(2 << 20, 'x') + "\"}", (2 << 20) + 11);
  EXPECT_FUTR_ERROR(KlBase::read(p), "KL base metadata of 2097163 bytes, more than the limit of 1048576");
  with_meta("{\"ctx\": 64, \"stride\": 32, \"tokens\": 1000}", 41);
  EXPECT_EQ(KlBase::read(p).meta()["tokens"], 1000);
  std::filesystem::remove(path);
}
