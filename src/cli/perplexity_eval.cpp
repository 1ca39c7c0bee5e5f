// Sliding-window perplexity (see perplexity_eval.h).
#include "cli/perplexity_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace futr {

std::vector<PplWindow> plan_perplexity_windows(int64_t n_tokens, int ctx, int stride) {
  FUTR_CHECK(ctx >= 2, "perplexity: --ctx must be at least 2 (got {})", ctx);
  FUTR_CHECK(stride >= 1 && stride <= ctx, "perplexity: --stride must be in 1..ctx={} (got {})",
             ctx, stride);
  FUTR_CHECK(n_tokens >= 2, "perplexity: the text has {} tokens; at least 2 are needed",
             n_tokens);
  std::vector<PplWindow> windows;
  int64_t prev_end = 0;
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min(begin + ctx, n_tokens);
    const int64_t from = std::max(prev_end, begin + 1);
    if (from < end) windows.push_back({begin, end, from});
    prev_end = end;
    if (end == n_tokens) break;
  }
  return windows;
}

void NllStats::add(double nll) {
  ++n_;
  const double d = nll - mean_;
  mean_ += d / double(n_);
  m2_ += d * (nll - mean_);
}

double NllStats::stderr_mean() const {
  if (n_ < 2) return 0.0;
  return std::sqrt(m2_ / double(n_ - 1) / double(n_));
}

double NllStats::ppl() const { return std::exp(mean_); }
double NllStats::ppl_stderr() const { return ppl() * stderr_mean(); }

double token_nll(std::span<const float> logits, int32_t target) {
  FUTR_CHECK(target >= 0 && size_t(target) < logits.size(),
             "perplexity: target id {} outside the logits ({})", target, logits.size());
  double mx = -INFINITY;
  for (float z : logits) mx = std::max(mx, double(z));
  double sum = 0.0;
  for (float z : logits) sum += std::exp(double(z) - mx);
  return mx + std::log(sum) - double(logits[size_t(target)]);
}

PplResult evaluate_perplexity(Backend& backend, std::span<const int32_t> tokens, int ctx,
                              int stride, int batch,
                              const std::function<void(const PplProgress&)>& progress,
                              const PplLogitsHook& on_logits) {
  FUTR_CHECK(batch >= 1, "perplexity: batch size must be positive (got {})", batch);
  FUTR_CHECK(ctx <= backend.capacity(), "perplexity: ctx {} exceeds the backend's context {}",
             ctx, backend.capacity());
  const auto windows = plan_perplexity_windows(int64_t(tokens.size()), ctx, stride);
  PplProgress p;
  for (const auto& w : windows) p.total += w.end - w.score_from;

  PplResult r;
  r.windows = int(windows.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& w : windows) {
    backend.reset();
    // Feed tokens [begin, end - 1): row j (token begin + j) predicts token
    // begin + j + 1, so the rows [score_from - 1 - begin, end - 1 - begin)
    // need logits.
    const int64_t fed = w.end - 1 - w.begin;
    const int64_t first_row = w.score_from - 1 - w.begin;
    for (int64_t a = 0; a < fed; a += batch) {
      const int64_t b = std::min(fed, a + batch);
      const int first = int(std::clamp(first_row - a, int64_t(0), b - a));
      const Tensor logits = backend.eval(tokens.subspan(size_t(w.begin + a), size_t(b - a)), first);
      const int rows = int(b - a) - first;
      std::vector<double> nll(static_cast<size_t>(rows));
      const size_t V = rows > 0 ? size_t(logits.dim(1)) : 0;
#pragma omp parallel for schedule(static)
      for (int i = 0; i < rows; ++i) {
        const int64_t target = w.begin + a + first + i + 1;
        nll[size_t(i)] = token_nll({logits.row(i), V}, tokens[size_t(target)]);
      }
      for (double v : nll) r.stats.add(v);
      if (on_logits && rows > 0) on_logits(logits, rows, tokens.data() + w.begin + a + first + 1);
      r.evaluated += b - a;
      if (progress) {
        p.scored = r.stats.count();
        p.evaluated = r.evaluated;
        p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        p.stats = &r.stats;
        progress(p);
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  FUTR_ASSERT(r.stats.count() == p.total);
  return r;
}

}  // namespace futr
