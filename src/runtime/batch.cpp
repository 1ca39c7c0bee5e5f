// Batch validation (see batch.h).
#include "runtime/batch.h"

#include <unordered_set>

#include "core/error.h"

namespace futr::runtime {

BatchPlan plan_batch(std::span<const BatchRow> rows, const EngineInfo& info,
                     const std::function<int(SeqId)>& length_of) {
  FUTR_CHECK(rows.size() <= size_t(info.max_step_tokens),
             "step: {} rows, more than the engine's max_step_tokens {}", rows.size(), info.max_step_tokens);
  BatchPlan plan;
  std::unordered_set<SeqId> seen;
  for (size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& r = rows[i];
    const int row = int(i);
    FUTR_CHECK(r.token >= 0 && r.token < info.vocab,
               "step: row {}: token id {} is outside the vocabulary (0..{})", row, r.token, info.vocab - 1);
    switch (r.out) {
      case RowOutput::kNone: break;
      case RowOutput::kLogits: ++plan.n_logits; break;
      case RowOutput::kToken: ++plan.n_tokens; break;
      case RowOutput::kLogprob:
        FUTR_CHECK(r.target >= 0 && r.target < info.vocab,
                   "step: row {}: log-probability target {} is outside the vocabulary (0..{})", row, r.target,
                   info.vocab - 1);
        ++plan.n_logprobs;
        break;
      default: fail("step: row {}: invalid output kind {}", row, int(r.out));
    }
    if (plan.runs.empty() || plan.runs.back().seq != r.seq) {
      const int len = length_of(r.seq);
      FUTR_CHECK(len >= 0, "step: row {}: sequence {} is not open", row, r.seq);
      FUTR_CHECK(seen.insert(r.seq).second,
                 "step: row {}: sequence {} has rows earlier in this batch; a sequence's rows must "
                 "be contiguous",
                 row, r.seq);
      FUTR_CHECK(r.pos == len,
                 "step: row {}: sequence {} holds {} positions, so its first row must be at "
                 "position {}, not {} (rows append; truncate() to go back)",
                 row, r.seq, len, len, r.pos);
      plan.runs.push_back({r.seq, row, row, -1, len});
    } else {
      FUTR_CHECK(r.pos == rows[i - 1].pos + 1,
                 "step: row {}: sequence {} at position {} follows position {}; rows of a sequence "
                 "are consecutive positions",
                 row, r.seq, r.pos, rows[i - 1].pos);
    }
    SeqRun& run = plan.runs.back();
    run.end = row + 1;
    if (run.first_out < 0 && r.out != RowOutput::kNone) run.first_out = row;
    FUTR_CHECK(int64_t(run.pos0) + (run.end - run.begin) <= info.ctx,
               "step: sequence {}: {} positions + {} rows exceed the context of {} positions", r.seq,
               run.pos0, run.end - run.begin, info.ctx);
  }
  for (SeqRun& run : plan.runs)
    if (run.first_out < 0) run.first_out = run.end;
  return plan;
}

}  // namespace futr::runtime
