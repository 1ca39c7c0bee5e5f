// SequenceRunner: one sequence over an Engine (see engine.h). make_engine()
// is defined by futr_engines (src/engines/factory.cpp), which sees every
// backend; this library sees none.
#include "runtime/engine.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace futr::runtime {

SequenceRunner::SequenceRunner(Engine& engine, SeqId id, const SamplerConfig& sampling)
    : engine_(engine), id_(id) {
  engine_.open(id_, sampling);
}

SequenceRunner::~SequenceRunner() {
  try {
    if (engine_.is_open(id_)) engine_.close(id_);
  } catch (...) {
    // Closing an open sequence does not fail; nothing to report from a destructor.
  }
}

int SequenceRunner::position() const { return engine_.length(id_); }
int SequenceRunner::capacity() const { return engine_.info().ctx; }
void SequenceRunner::reset() { engine_.truncate(id_, 0); }
void SequenceRunner::truncate(int len) { engine_.truncate(id_, len); }

void SequenceRunner::check_call(std::span<const int32_t> tokens, int first_out) const {
  const EngineInfo& info = engine_.info();
  const int n = int(tokens.size());
  FUTR_CHECK(tokens.size() < size_t(1) << 30, "{} tokens in one call", tokens.size());
  FUTR_CHECK(first_out >= 0 && first_out <= n, "first output row {} outside the batch of {} tokens",
             first_out, n);
  // Checked here for the whole call, so that a prompt split into several
  // steps is refused before its first step (nothing changes).
  const int pos0 = position();
  FUTR_CHECK(int64_t(pos0) + n <= info.ctx,
             "context length exceeded: {} tokens already in the KV cache + {} new > context {} "
             "(use a larger --ctx)",
             pos0, n, info.ctx);
  for (int i = 0; i < n; ++i)
    FUTR_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < info.vocab,
               "token id {} at batch position {} is outside the vocabulary (0..{})", tokens[size_t(i)], i,
               info.vocab - 1);
}

void SequenceRunner::run(std::span<const int32_t> tokens, int first_out, bool prompt, RowOutput out,
                         const std::function<void(const StepResult&, int first, int count)>& take) {
  check_call(tokens, first_out);
  const int n = int(tokens.size());
  const int pos0 = position();
  std::vector<BatchRow> rows;
  const int step = std::max(1, engine_.info().max_step_tokens);
  for (int a = 0; a < n; a += step) {
    const int b = std::min(n, a + step);
    rows.clear();
    for (int i = a; i < b; ++i)
      rows.push_back({tokens[size_t(i)], id_, pos0 + i, i >= first_out ? out : RowOutput::kNone, -1, prompt});
    const StepResult r = engine_.step(rows);
    const int first = std::max(a, first_out);
    if (first < b) take(r, first - first_out, b - first);
  }
}

Tensor SequenceRunner::eval(std::span<const int32_t> tokens, int first_logit, bool prompt) {
  check_call(tokens, first_logit);  // before the output is sized by first_logit
  const int64_t vocab = engine_.info().vocab;
  Tensor logits({int64_t(tokens.size()) - first_logit, vocab});
  run(tokens, first_logit, prompt, RowOutput::kLogits, [&](const StepResult& r, int first, int count) {
    FUTR_ASSERT(r.logits.numel() == int64_t(count) * vocab);
    std::memcpy(logits.row(first), r.logits.ptr(), size_t(r.logits.numel()) * sizeof(float));
  });
  return logits;
}

std::vector<int32_t> SequenceRunner::draw(std::span<const int32_t> tokens, int first_draw, bool prompt) {
  std::vector<int32_t> out;
  run(tokens, first_draw, prompt, RowOutput::kToken, [&](const StepResult& r, int, int count) {
    FUTR_ASSERT(r.tokens.size() == size_t(count));
    out.insert(out.end(), r.tokens.begin(), r.tokens.end());
  });
  return out;
}

}  // namespace futr::runtime
