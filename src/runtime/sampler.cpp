// Next-token sampling (see sampler.h).
#include "runtime/sampler.h"

#include <cfloat>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace futr::runtime {

int32_t argmax(std::span<const float> logits) {
  FUTR_CHECK(!logits.empty(), "sampler: empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

namespace {
constexpr size_t kMaxStops = 16, kMaxStopBytes = 256;
constexpr int kMaxPenaltyLastN = 1 << 20;
}  // namespace

void validate_sampler_config(const SamplerConfig& c, const std::string& p) {
  // NOTE: written as !(in range) so that NaN fails every check.
  FUTR_CHECK(std::isfinite(c.temperature) && c.temperature >= 0.0f && c.temperature <= 100.0f,
             "{}temperature must be in [0, 100] (got {})", p, c.temperature);
  FUTR_CHECK(c.top_p > 0.0f && c.top_p <= 1.0f, "{}top-p must be in (0, 1] (got {})", p, c.top_p);
  FUTR_CHECK(c.min_p >= 0.0f && c.min_p <= 1.0f, "{}min-p must be in [0, 1] (got {})", p, c.min_p);
  FUTR_CHECK(c.repetition_penalty > 0.0f && c.repetition_penalty <= 10.0f,
             "{}repetition-penalty must be in (0, 10] (1 = off; got {})", p, c.repetition_penalty);
  FUTR_CHECK(c.presence_penalty >= -2.0f && c.presence_penalty <= 2.0f,
             "{}presence-penalty must be in [-2, 2] (got {})", p, c.presence_penalty);
  FUTR_CHECK(c.frequency_penalty >= -2.0f && c.frequency_penalty <= 2.0f,
             "{}frequency-penalty must be in [-2, 2] (got {})", p, c.frequency_penalty);
  FUTR_CHECK(c.penalty_last_n >= 0 && c.penalty_last_n <= kMaxPenaltyLastN,
             "{}penalty-last-n must be in [0, {}] (0 = the whole history; got {})", p, kMaxPenaltyLastN,
             c.penalty_last_n);
  FUTR_CHECK(c.stop.size() <= kMaxStops, "{}stop: at most {} stop strings (got {})", p, kMaxStops,
             c.stop.size());
  for (const std::string& s : c.stop)
    FUTR_CHECK(!s.empty() && s.size() <= kMaxStopBytes,
               "{}stop: each stop string must have 1 to {} bytes (got {})", p, kMaxStopBytes, s.size());
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {
  validate_sampler_config(config);
}

bool uses_history(const SamplerConfig& c) {
  return c.repetition_penalty != 1.0f || c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f;
}

bool Sampler::penalties_on() const {
  return !history_.empty() && (config_.repetition_penalty != 1.0f || config_.presence_penalty != 0.0f ||
                               config_.frequency_penalty != 0.0f);
}

void Sampler::accept(int32_t token, bool generated) {
  history_.emplace_back(token, generated);
  if (config_.penalty_last_n > 0 && history_.size() > size_t(config_.penalty_last_n)) history_.pop_front();
}

std::vector<float> Sampler::penalized(std::span<const float> logits) const {
  std::vector<float> z(logits.begin(), logits.end());
  if (!penalties_on()) return z;
  std::unordered_map<int32_t, int> generated;  // id -> count among generated tokens in the window
  std::vector<int32_t> seen;                   // distinct ids in the window
  std::unordered_map<int32_t, bool> in_window;
  for (const auto& [id, gen] : history_) {
    if (id < 0 || size_t(id) >= z.size()) continue;  // not in this vocabulary: nothing to penalize
    if (!in_window[id]) {
      in_window[id] = true;
      seen.push_back(id);
    }
    if (gen) ++generated[id];
  }
  const float r = config_.repetition_penalty;
  for (int32_t id : seen) {
    float& x = z[size_t(id)];
    // NOTE: a tiny r inside the range would take x / r past FLT_MAX (+inf:
    // refused as a broken forward pass); the result is kept finite instead.
    if (r != 1.0f) x = x > 0.0f ? std::min(x / r, FLT_MAX) : std::max(x * r, -FLT_MAX);
    if (const auto it = generated.find(id); it != generated.end())
      x -= config_.presence_penalty + config_.frequency_penalty * float(it->second);
  }
  return z;
}

std::span<const float> Sampler::drawable(std::span<const float> logits) const {
  FUTR_CHECK(!logits.empty(), "sampler: empty logits");
  if (vocab_limit_ > 0 && size_t(vocab_limit_) < logits.size()) logits = logits.first(size_t(vocab_limit_));
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float z = logits[i];
    // NOTE: -inf is a masked id (allowed); NaN and +inf mean the forward pass broke.
    FUTR_CHECK(!std::isnan(z) && z != INFINITY,
               "sampler: logit of id {} is {}: the model's logits are not finite (NaN or +inf come from the "
               "weights or the forward pass), refusing to sample",
               i, z);
    any_finite = any_finite || std::isfinite(z);
  }
  FUTR_CHECK(any_finite, "sampler: all {} drawable logits are -inf: nothing can be sampled", logits.size());
  return logits;
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

std::vector<std::pair<int32_t, double>> Sampler::distribution(std::span<const float> row) const {
  const std::vector<float> z = penalized(drawable(row));
  const std::span<const float> logits(z);
  FUTR_CHECK(config_.temperature > 0.0f, "sampler: distribution() needs a temperature > 0");
  // Ids in descending logit order, ties by id; only the top k are needed.
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = config_.top_k > 0 ? std::min(size_t(config_.top_k), ids.size()) : ids.size();
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
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
  // Min-p: drop what is less likely than min_p times the most likely (dist[0]).
  if (config_.min_p > 0.0f) {
    const double floor = double(config_.min_p) * dist[0].second;
    size_t keep = 1;
    while (keep < dist.size() && dist[keep].second >= floor) ++keep;
    if (keep < dist.size()) {
      dist.resize(keep);
      double kept = 0.0;
      for (const auto& e : dist) kept += e.second;
      for (auto& e : dist) e.second /= kept;
    }
  }
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
  if (config_.temperature == 0.0f) {
    const std::span<const float> z = drawable(logits);
    return penalties_on() ? argmax(penalized(z)) : argmax(z);
  }
  const auto dist = distribution(logits);
  return pick(dist, uniform());
}

int32_t Sampler::sample_with(std::span<const float> logits, double u) const {
  FUTR_CHECK(u >= 0.0 && u < 1.0, "sampler: the uniform must be in [0, 1) (got {})", u);
  return pick(distribution(logits), u);
}

int32_t Sampler::pick(const std::vector<std::pair<int32_t, double>>& dist, double u) {
  double cum = 0.0;
  for (const auto& [id, p] : dist) {
    cum += p;
    if (u < cum) return id;
  }
  return dist.back().first;  // u within rounding of 1
}

std::string StopMatcher::push(const std::string& piece) {
  if (stopped_) return {};
  pending_ += piece;
  if (stops_.empty()) return std::exchange(pending_, {});
  // The earliest complete match ends the stream.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && (first == std::string::npos || at < first)) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() { return stopped_ ? std::string() : std::exchange(pending_, {}); }

}  // namespace futr::runtime
