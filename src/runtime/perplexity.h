// Perplexity of a token sequence, evaluated in context windows.
//
// Windows (the usual sliding-window evaluation with context C and stride S):
// window w covers tokens [b, e) with b = w*S and e = min(b + C, N); it scores
// the targets t in [max(e_prev, b + 1), e), where e_prev is the end of the
// previous window (0 for the first). So the first window scores all C - 1
// tokens it can predict, and each later window only the last S (the tokens
// not scored before), each predicted from at least C - S tokens of context.
// With S == C the windows do not overlap and each scores C - 1 targets.
// Every window is a fresh sequence (positions restart at 0) of the Engine.
//
// Batching: each window is fed in pieces of min(batch, max_step_tokens)
// tokens, one piece per step; when the engine holds several sequences
// (max_seqs > 1) and no logits hook is given, up to max_seqs windows run side
// by side, one piece of each per step. Each window sees the same pieces
// either way and the NLLs are accumulated in window order, so the result is
// bit for bit the same on the CPU engines (except FP8, whose delayed scaling
// is engine state that depends on the order of calls). Scored rows ask the
// engine for RowOutput::kLogprob (no logits copied), or for their logits
// when a hook needs them.
//
// Per target, NLL_t = -log softmax(z_{t-1})[x_t] = logsumexp(z) - z[x_t]
// (double precision), where z_{t-1} are the logits at the previous position.
//   ppl      = exp(mean NLL)
//   SE(mean) = sd(NLL) / sqrt(n)         (sample standard deviation)
//   SE(ppl)  = ppl * SE(mean)            (delta method: d exp(m)/dm = exp(m))
//
// Tests: tests/runtime/perplexity_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "runtime/engine.h"

namespace futr::runtime {

struct PplWindow {
  int64_t begin = 0;       // first token fed
  int64_t end = 0;         // one past the last token of the window
  int64_t score_from = 0;  // first target scored; targets [score_from, end)
};

// The windows for N tokens; futr::Error for ctx < 2, stride outside
// [1, ctx] or fewer than 2 tokens.
std::vector<PplWindow> plan_perplexity_windows(int64_t n_tokens, int ctx, int stride);

// Running mean and variance of per-token NLLs (Welford).
class NllStats {
 public:
  void add(double nll);
  int64_t count() const { return n_; }
  double mean() const { return mean_; }
  double stderr_mean() const;  // sd / sqrt(n); 0 for n < 2
  double ppl() const;
  double ppl_stderr() const;

 private:
  int64_t n_ = 0;
  double mean_ = 0.0;
  double m2_ = 0.0;  // sum of squared deviations
};

// -log softmax(logits)[target], in double.
double token_nll(std::span<const float> logits, int32_t target);

struct PplProgress {
  int64_t scored = 0;     // targets scored so far
  int64_t total = 0;      // targets to score
  int64_t evaluated = 0;  // tokens run through the model so far
  double seconds = 0.0;   // elapsed
  const NllStats* stats = nullptr;
};

struct PplResult {
  NllStats stats;
  int64_t evaluated = 0;  // tokens run through the model
  int windows = 0;
  double seconds = 0.0;
};

// Sees the logits of the scored rows of every step, in scoring order:
// rows [0, rows) of `logits` ([rows, vocab]) predict targets[0 .. rows).
// (--kl-base / --save-kl-base, quant/kl.h.)
using PplLogitsHook = std::function<void(const Tensor& logits, int rows, const int32_t* targets)>;

// Runs every window through `engine` (whose context must be >= ctx) as
// sequences it opens and closes (ids not otherwise open), feeding at most
// `batch` tokens of a window per step, and calls `progress` after each step
// (and `on_logits`, if given, with the step's scored rows; one window at a
// time then).
PplResult evaluate_perplexity(Engine& engine, std::span<const int32_t> tokens, int ctx, int stride, int batch,
                              const std::function<void(const PplProgress&)>& progress = {},
                              const PplLogitsHook& on_logits = {});

}  // namespace futr::runtime
