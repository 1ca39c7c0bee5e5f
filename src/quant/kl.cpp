// Coarsened KL divergence against a saved base run (see kl.h).
#include "quant/kl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json.h"

namespace futr::quant {

namespace {

constexpr char kMagic[8] = {'F', 'U', 'T', 'R', 'K', 'L', 'B', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxMetaBytes = uint64_t(1) << 20;  // the metadata futr writes is ~200 bytes

// max_j z_j and log sum_j exp(z_j - max) in double.
void log_sum_exp(std::span<const float> z, double& mx, double& lse) {
  mx = -std::numeric_limits<double>::infinity();
  for (float v : z) mx = std::max(mx, double(v));
  double s = 0.0;
  for (float v : z) s += std::exp(double(v) - mx);
  lse = mx + std::log(s);
}

template <class T>
void put(std::ofstream& f, const T& v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

KlEntry make_kl_entry(std::span<const float> z, int32_t target, int k) {
  FUTR_CHECK(k >= 1 && size_t(k) <= z.size(), "KL base: k = {} for a vocabulary of {}", k, z.size());
  FUTR_CHECK(target >= 0 && size_t(target) < z.size(), "KL base: target {} outside the vocabulary", target);
  double mx, lse;
  log_sum_exp(z, mx, lse);
  std::vector<int32_t> idx(z.size());
  std::iota(idx.begin(), idx.end(), 0);
  // Largest logits first; ties by lower id (the argmax convention).
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return z[size_t(a)] > z[size_t(b)] || (z[size_t(a)] == z[size_t(b)] && a < b);
  });
  KlEntry e;
  e.target = target;
  e.nll = float(lse - double(z[size_t(target)]));
  e.ids.assign(idx.begin(), idx.begin() + k);
  double top = 0.0;
  for (int i = 0; i < k; ++i) {
    const double zi = double(z[size_t(e.ids[size_t(i)])]);
    e.logp.push_back(float(zi - lse));
    top += std::exp(zi - mx);
  }
  double total = 0.0;
  for (float v : z) total += std::exp(double(v) - mx);
  const double rest = std::max(0.0, total - top);  // sum over the tokens outside T (relative to mx)
  e.log_rest = rest > 0.0 ? float(std::log(rest) + mx - lse) : -std::numeric_limits<float>::infinity();
  return e;
}

KlRow compare_kl_row(const KlEntry& b, std::span<const float> z) {
  FUTR_CHECK(b.target >= 0 && size_t(b.target) < z.size(), "KL: target {} outside the logits ({})", b.target,
             z.size());
  double mx, lse;
  log_sum_exp(z, mx, lse);
  KlRow r;
  r.nll = lse - double(z[size_t(b.target)]);
  size_t arg = 0;
  for (size_t j = 1; j < z.size(); ++j)
    if (z[j] > z[arg]) arg = j;
  r.top1 = !b.ids.empty() && int32_t(arg) == b.ids[0];
  double total = 0.0, top = 0.0;
  for (float v : z) total += std::exp(double(v) - mx);
  for (size_t i = 0; i < b.ids.size(); ++i) {
    FUTR_CHECK(b.ids[i] >= 0 && size_t(b.ids[i]) < z.size(), "KL: base token id {} outside the logits",
               b.ids[i]);
    const double lq = double(z[size_t(b.ids[i])]) - lse;
    const double lp = double(b.logp[i]);
    top += std::exp(double(z[size_t(b.ids[i])]) - mx);
    r.kl += std::exp(lp) * (lp - lq);
  }
  if (std::isfinite(b.log_rest)) {
    const double lp = double(b.log_rest);
    const double rest = std::max(total - top, total * 1e-300);
    const double lq = std::log(rest) - std::log(total);
    r.kl += std::exp(lp) * (lp - lq);
  }
  r.kl = std::max(r.kl, 0.0);  // rounding can leave -1e-17 for identical distributions
  return r;
}

void KlBase::add_rows(const float* logits, int rows, int vocab, const int32_t* targets) {
  if (vocab_ == 0) vocab_ = vocab;
  FUTR_CHECK(vocab == vocab_, "KL base: rows of {} logits, expected {}", vocab, vocab_);
  std::vector<KlEntry> add(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 4)
  for (int i = 0; i < rows; ++i)
    add[size_t(i)] = make_kl_entry({logits + size_t(i) * size_t(vocab), size_t(vocab)}, targets[i], k_);
  for (auto& e : add) entries_.push_back(std::move(e));
}

void KlBase::write(const std::string& path, const nlohmann::json& meta) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  FUTR_CHECK(f.good(), "{}: cannot open for writing", path);
  const std::string js = meta.dump();
  FUTR_CHECK(js.size() <= kMaxMetaBytes, "{}: KL base metadata of {} bytes, more than the limit of {}", path,
             js.size(), kMaxMetaBytes);
  f.write(kMagic, 8);
  put(f, kVersion);
  put(f, uint32_t(k_));
  put(f, uint32_t(vocab_));
  put(f, uint32_t(0));
  put(f, uint64_t(entries_.size()));
  put(f, uint64_t(js.size()));
  f.write(js.data(), std::streamsize(js.size()));
  for (const KlEntry& e : entries_) {
    put(f, e.target);
    put(f, e.nll);
    f.write(reinterpret_cast<const char*>(e.ids.data()), std::streamsize(4 * e.ids.size()));
    f.write(reinterpret_cast<const char*>(e.logp.data()), std::streamsize(4 * e.logp.size()));
    put(f, e.log_rest);
  }
  f.flush();
  FUTR_CHECK(f.good(), "{}: write error", path);
}

KlBase KlBase::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  FUTR_CHECK(f.good(), "{}: cannot open the KL base file", path);
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  char magic[8] = {};
  uint32_t version = 0, k = 0, vocab = 0, reserved = 0;
  uint64_t entries = 0, json_bytes = 0;
  f.read(magic, 8);
  FUTR_CHECK(f.good() && std::memcmp(magic, kMagic, 8) == 0,
             "{}: not a KL base file (bad magic; write one with futr perplexity --save-kl-base)", path);
  f.read(reinterpret_cast<char*>(&version), 4);
  f.read(reinterpret_cast<char*>(&k), 4);
  f.read(reinterpret_cast<char*>(&vocab), 4);
  f.read(reinterpret_cast<char*>(&reserved), 4);
  f.read(reinterpret_cast<char*>(&entries), 8);
  f.read(reinterpret_cast<char*>(&json_bytes), 8);
  FUTR_CHECK(f.good(), "{}: truncated KL base header", path);
  FUTR_CHECK(version == kVersion, "{}: KL base version {} is not supported (this futr reads {})", path,
             version, kVersion);
  FUTR_CHECK(k >= 1 && k <= 65536 && vocab >= k && vocab <= (1u << 24),
             "{}: KL base with k = {} and vocab = {} is impossible", path, k, vocab);
  const uint64_t header = 40;
  const uint64_t per = 4ull * (3 + 2ull * k);
  FUTR_CHECK(json_bytes <= size - std::min(size, header) && entries <= (size - header - json_bytes) / per &&
                 header + json_bytes + entries * per == size,
             "{}: KL base sizes do not add up ({} entries of {} bytes + {} bytes of metadata in a file "
             "of {} bytes)",
             path, entries, per, json_bytes, size);
  // The metadata through the one JSON entry point (core/json.h: nesting,
  // duplicate keys, size), its size checked before it is read.
  FUTR_CHECK(json_bytes <= kMaxMetaBytes, "{}: KL base metadata of {} bytes, more than the limit of {}", path,
             json_bytes, kMaxMetaBytes);
  KlBase b(static_cast<int>(k), static_cast<int>(vocab));
  std::string js(size_t(json_bytes), '\0');
  f.read(js.data(), std::streamsize(js.size()));
  b.meta_ = parse_json_document(js, path + ": KL base metadata", kMaxJsonDepth, kMaxMetaBytes);
  FUTR_CHECK(b.meta_.is_object(), "{}: KL base metadata is not a JSON object", path);
  for (const char* key : {"ctx", "stride"})  // what futr perplexity --kl-base compares with its run
    if (b.meta_.contains(key))
      json_int(b.meta_[key], fmt::format("{}: KL base metadata {}", path, key), 0, INT32_MAX);
  if (b.meta_.contains("tokens"))
    json_int(b.meta_["tokens"], path + ": KL base metadata tokens", 0, INT64_MAX);
  b.entries_.resize(size_t(entries));
  for (KlEntry& e : b.entries_) {
    e.ids.resize(k);
    e.logp.resize(k);
    f.read(reinterpret_cast<char*>(&e.target), 4);
    f.read(reinterpret_cast<char*>(&e.nll), 4);
    f.read(reinterpret_cast<char*>(e.ids.data()), std::streamsize(4 * k));
    f.read(reinterpret_cast<char*>(e.logp.data()), std::streamsize(4 * k));
    f.read(reinterpret_cast<char*>(&e.log_rest), 4);
    for (int32_t id : e.ids)
      FUTR_CHECK(id >= 0 && uint32_t(id) < vocab, "{}: KL base token id {} outside the vocabulary", path, id);
    FUTR_CHECK(e.target >= 0 && uint32_t(e.target) < vocab, "{}: KL base target {} outside the vocabulary",
               path, e.target);
  }
  FUTR_CHECK(f.good(), "{}: truncated KL base entries", path);
  return b;
}

void KlCompare::add_rows(const float* logits, int rows, int vocab, const int32_t* targets) {
  FUTR_CHECK(vocab == base_.vocab(), "KL: the model has {} logits, the base file {}", vocab, base_.vocab());
  FUTR_CHECK(n_ + rows <= base_.size(),
             "KL: the run scores more tokens than the base file holds ({}); use the same text, "
             "--ctx, --stride and --max-tokens",
             base_.size());
  std::vector<KlRow> r(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 4)
  for (int i = 0; i < rows; ++i)
    r[size_t(i)] = compare_kl_row(base_.entry(n_ + i), {logits + size_t(i) * size_t(vocab), size_t(vocab)});
  for (int i = 0; i < rows; ++i) {
    const KlEntry& b = base_.entry(n_ + i);
    FUTR_CHECK(b.target == targets[i],
               "KL: scored token {} is {} here but {} in the base file: the base was made from "
               "another text or window plan (use the same text, --ctx, --stride, --max-tokens)",
               n_ + i, targets[i], b.target);
    const KlRow& x = r[size_t(i)];
    kl_sum_ += x.kl;
    kl_sq_ += x.kl * x.kl;
    top1_ += x.top1 ? 1 : 0;
    const double d = x.nll - double(b.nll);
    d_sum_ += d;
    d_sq_ += d * d;
    base_nll_sum_ += double(b.nll);
    nll_sum_ += x.nll;
  }
  n_ += rows;
}

namespace {
double se(double sum, double sq, int64_t n) {
  if (n < 2) return 0.0;
  const double m = sum / double(n);
  const double var = std::max(0.0, (sq - double(n) * m * m) / double(n - 1));
  return std::sqrt(var / double(n));
}
}  // namespace

double KlCompare::kl_stderr() const { return se(kl_sum_, kl_sq_, n_); }
double KlCompare::nll_delta_stderr() const { return se(d_sum_, d_sq_, n_); }

}  // namespace futr::quant
