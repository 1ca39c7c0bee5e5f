// Sliding-window perplexity over an Engine (see perplexity.h).
#include "runtime/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

#include "core/error.h"

namespace futr::runtime {

std::vector<PplWindow> plan_perplexity_windows(int64_t n_tokens, int ctx, int stride) {
  FUTR_CHECK(ctx >= 2, "perplexity: --ctx must be at least 2 (got {})", ctx);
  FUTR_CHECK(stride >= 1 && stride <= ctx, "perplexity: --stride must be in 1..ctx={} (got {})", ctx, stride);
  FUTR_CHECK(n_tokens >= 2, "perplexity: the text has {} tokens; at least 2 are needed", n_tokens);
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

namespace {

// A window being evaluated: its sequence, how far it is fed, and the NLLs of
// its scored rows not yet added to the statistics (windows are added in order).
struct ActiveWindow {
  PplWindow w;
  SeqId seq = 0;
  int64_t fed = 0;          // tokens fed so far: rows [0, fed) of tokens [begin, end - 1)
  std::vector<double> nll;  // scored, not yet accumulated
};

}  // namespace

PplResult evaluate_perplexity(Engine& engine, std::span<const int32_t> tokens, int ctx, int stride, int batch,
                              const std::function<void(const PplProgress&)>& progress,
                              const PplLogitsHook& on_logits) {
  FUTR_CHECK(batch >= 1, "perplexity: batch size must be positive (got {})", batch);
  const EngineInfo& info = engine.info();
  FUTR_CHECK(ctx <= info.ctx, "perplexity: ctx {} exceeds the engine's context {}", ctx, info.ctx);
  const auto windows = plan_perplexity_windows(int64_t(tokens.size()), ctx, stride);
  for (int32_t t : tokens)
    FUTR_CHECK(t >= 0 && t < info.vocab, "perplexity: token id {} is outside the vocabulary (0..{})", t,
               info.vocab - 1);
  PplProgress p;
  for (const auto& w : windows) p.total += w.end - w.score_from;

  // Pieces of `piece` tokens; `lanes` windows side by side.
  const int64_t piece = std::min(batch, info.max_step_tokens);
  FUTR_CHECK(piece >= 1, "perplexity: the engine takes no rows per step");
  int lanes = on_logits ? 1 : std::min<int>(engine.free_sequences(), int(info.max_step_tokens / piece));
  lanes = std::max(1, lanes);
  const int vocab = info.vocab;

  PplResult r;
  r.windows = int(windows.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::deque<ActiveWindow> active;
  size_t next = 0;
  SeqId next_id = 0;
  std::vector<BatchRow> rows;
  std::vector<int32_t> targets;
  std::vector<int64_t> target_pos;  // [targets] position of each target in the text (for messages)
  struct Span {
    size_t lane;
    int64_t a, b, first;
  };  // a piece: rows [a, b), scored from `first`
  std::vector<Span> spans;
  try {
    while (next < windows.size() || !active.empty()) {
      while (active.size() < size_t(lanes) && next < windows.size()) {
        ActiveWindow aw;
        aw.w = windows[next++];
        while (engine.is_open(next_id)) ++next_id;
        aw.seq = next_id++;
        engine.open(aw.seq);
        active.push_back(std::move(aw));
      }
      // One piece of every active window. Feed tokens [begin, end - 1): row j
      // (token begin + j) predicts token begin + j + 1, so rows from
      // score_from - 1 - begin need their prediction.
      rows.clear();
      targets.clear();
      target_pos.clear();
      spans.clear();
      for (size_t i = 0; i < active.size(); ++i) {
        const ActiveWindow& aw = active[i];
        const int64_t len = aw.w.end - 1 - aw.w.begin;
        const int64_t first_row = aw.w.score_from - 1 - aw.w.begin;
        const int64_t a = aw.fed, b = std::min(len, a + piece);
        for (int64_t j = a; j < b; ++j) {
          BatchRow row;
          row.token = tokens[size_t(aw.w.begin + j)];
          row.seq = aw.seq;
          row.pos = int(j);
          row.prompt = true;  // scored text: given, never drawn
          if (j >= first_row) {
            row.target = tokens[size_t(aw.w.begin + j + 1)];
            row.out = on_logits ? RowOutput::kLogits : RowOutput::kLogprob;
            targets.push_back(row.target);
            target_pos.push_back(aw.w.begin + j + 1);
          }
          rows.push_back(row);
        }
        spans.push_back({i, a, b, std::max(a, first_row)});
      }
      const StepResult res = engine.step(rows);
      // Scored rows, in batch order: logprobs (or logits -> NLL).
      std::vector<double> nll(targets.size());
      if (on_logits) {
        const int n = int(targets.size());
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; ++i)
          nll[size_t(i)] = token_nll({res.logits.row(i), size_t(vocab)}, targets[size_t(i)]);
        if (n > 0) on_logits(res.logits, n, targets.data());
      } else {
        FUTR_ASSERT(res.logprobs.size() == targets.size());
        for (size_t i = 0; i < nll.size(); ++i) nll[i] = -res.logprobs[i];
      }
      // NaN/Inf logits would make the perplexity NaN (and exit 0): refuse, naming the token.
      for (size_t i = 0; i < nll.size(); ++i)
        FUTR_CHECK(
            std::isfinite(nll[i]),
            "perplexity: token {} of the text has a non-finite log-probability ({}): the model's logits "
            "hold NaN or Inf",
            target_pos[i], nll[i]);
      size_t at = 0;
      for (const Span& sp : spans) {
        ActiveWindow& aw = active[sp.lane];
        const int64_t scored = std::max<int64_t>(0, sp.b - sp.first);
        aw.nll.insert(aw.nll.end(), nll.begin() + long(at), nll.begin() + long(at + size_t(scored)));
        at += size_t(scored);
        aw.fed = sp.b;
        r.evaluated += sp.b - sp.a;
      }
      // Accumulate in window order: the front window's NLLs as they come,
      // the others' once they reach the front.
      while (!active.empty()) {
        ActiveWindow& f = active.front();
        for (double v : f.nll) r.stats.add(v);
        f.nll.clear();
        if (f.fed < f.w.end - 1 - f.w.begin) break;
        engine.close(f.seq);
        active.pop_front();
      }
      if (progress) {
        p.scored = r.stats.count();
        p.evaluated = r.evaluated;
        p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        p.stats = &r.stats;
        progress(p);
      }
    }
  } catch (...) {
    for (const ActiveWindow& aw : active)
      if (engine.is_open(aw.seq)) engine.close(aw.seq);
    throw;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  FUTR_ASSERT(r.stats.count() == p.total);
  return r;
}

}  // namespace futr::runtime
