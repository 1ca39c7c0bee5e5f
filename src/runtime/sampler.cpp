// Next-token sampling (see sampler.h).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace futr::runtime {

int32_t argmax(std::span<const float> logits) {
  FUTR_CHECK(!logits.empty(), "sampler: empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {
  FUTR_CHECK(std::isfinite(config.temperature) && config.temperature >= 0.0f,
             "--temperature must be >= 0 (got {})", config.temperature);
  FUTR_CHECK(config.top_p > 0.0f && config.top_p <= 1.0f, "--top-p must be in (0, 1] (got {})",
             config.top_p);
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

std::vector<std::pair<int32_t, double>> Sampler::distribution(
    std::span<const float> logits) const {
  FUTR_CHECK(!logits.empty(), "sampler: empty logits");
  FUTR_CHECK(config_.temperature > 0.0f, "sampler: distribution() needs a temperature > 0");
  // Ids in descending logit order, ties by id; only the top k are needed.
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = config_.top_k > 0 ? std::min(size_t(config_.top_k), ids.size()) : ids.size();
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), by_logit);
  ids.resize(k);
  // Softmax of z / T over the kept ids (double; the max subtracted).
  const double zmax = logits[size_t(ids[0])];
  FUTR_CHECK(std::isfinite(zmax), "sampler: the largest logit is not finite ({})", zmax);
  std::vector<std::pair<int32_t, double>> dist;
  dist.reserve(k);
  double sum = 0.0;
  for (int32_t id : ids) {
    const double p = std::exp((double(logits[size_t(id)]) - zmax) / config_.temperature);
    dist.emplace_back(id, p);
    sum += p;
  }
  for (auto& e : dist) e.second /= sum;
  // Nucleus: the shortest prefix reaching top_p.
  if (config_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = 0;
    while (keep < dist.size()) {
      cum += dist[keep].second;
      ++keep;
      if (cum >= double(config_.top_p)) break;
    }
    dist.resize(keep);
    for (auto& e : dist) e.second /= cum;
  }
  return dist;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (config_.temperature == 0.0f) return argmax(logits);
  const auto dist = distribution(logits);
  const double u = uniform();
  double cum = 0.0;
  for (const auto& [id, p] : dist) {
    cum += p;
    if (u < cum) return id;
  }
  return dist.back().first;  // u within rounding of 1
}

}  // namespace futr::runtime
