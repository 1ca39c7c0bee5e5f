// Speculative decoding of one sequence (see speculative.h).
#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace futr::runtime {

std::string to_string(SpeculativeMode m) { return m == SpeculativeMode::kNgram ? "ngram" : "off"; }

std::vector<std::string> speculative_mode_names() { return {"ngram", "off"}; }

SpeculativeMode parse_speculative_mode(const std::string& s) {
  if (s == "ngram") return SpeculativeMode::kNgram;
  if (s == "off") return SpeculativeMode::kOff;
  fail("--speculative: unknown mode '{}' (ngram | off)", s);
}

std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config) {
  if (config.mode == SpeculativeMode::kOff) return nullptr;
  NgramDrafterConfig c;
  c.draft_max = config.draft_max;
  return std::make_unique<NgramDrafter>(c);
}

int default_draft_max(const Engine& engine) {
  return engine.step_rows(3) != 3 ? kDraftMaxPaddedDefault : kDraftMaxDefault;
}

nlohmann::json SpeculativeStats::to_json() const {
  return {{"steps", steps}, {"drafted", drafted}, {"accepted", accepted}, {"acceptance", acceptance()}};
}

DraftVerdict verify_draft(Sampler& sampler, std::span<const float> logits, int32_t draft) {
  DraftVerdict v;
  v.token = sampler.sample(logits);  // one uniform: accept iff it lands in the draft's interval
  v.accepted = draft >= 0 && v.token == draft;
  return v;
}

SpeculativeDecoder::SpeculativeDecoder(SequenceRunner& seq, Drafter* drafter, bool engine_draws)
    : seq_(seq), drafter_(drafter), engine_draws_(engine_draws) {
  if (!drafter_) return;
  FUTR_CHECK(drafter_->size() == seq_.position(),
             "speculative decoding: the drafter holds {} tokens, the sequence {} positions", drafter_->size(),
             seq_.position());
  const Engine& e = seq_.engine();
  drafter_->set_step_rows([&e](int r) { return e.step_rows(r); });
}

void SpeculativeDecoder::prefill(std::span<const int32_t> tokens) {
  FUTR_CHECK(!tokens.empty(), "speculative decoding: nothing to evaluate");
  if (engine_draws_) drawn_ = seq_.draw(tokens, int(tokens.size()) - 1, /*prompt=*/true);
  else rows_ = seq_.eval(tokens, int(tokens.size()) - 1, /*prompt=*/true);
  if (drafter_) drafter_->push(tokens);
  draft_.clear();
  base_ = seq_.position() - 1;
  row_ = 0;
}

std::span<const float> SpeculativeDecoder::logits() const {
  FUTR_ASSERT(!engine_draws_ && rows_.rank() == 2 && row_ < rows_.dim(0));
  return {rows_.row(row_), size_t(rows_.dim(1))};
}

DraftVerdict SpeculativeDecoder::draw(Sampler& sampler, std::span<const int32_t> banned) {
  const int32_t draft = row_ < int(draft_.size()) ? draft_[size_t(row_)] : -1;
  if (engine_draws_) {  // the engine's sampler drew the row: greedy with drafts (see the constructor)
    FUTR_ASSERT(banned.empty() && row_ < int(drawn_.size()));
    const int32_t t = drawn_[size_t(row_)];
    return {t, draft >= 0 && t == draft};
  }
  if (banned.empty()) return verify_draft(sampler, logits(), draft);
  const std::span<const float> row = logits();
  masked_.assign(row.begin(), row.end());
  for (int32_t id : banned)
    if (id >= 0 && size_t(id) < masked_.size()) masked_[size_t(id)] = -INFINITY;
  return verify_draft(sampler, masked_, draft);
}

void SpeculativeDecoder::advance(int32_t token, int draws_left) {
  FUTR_ASSERT(draws_left >= 1);
  if (drafter_) drafter_->push(token);
  if (row_ < int(draft_.size()) && draft_[size_t(row_)] == token) {  // accepted: its row ran already
    ++row_;
    ++stats_.accepted;
    return;
  }
  // The correction of a rejected draft, or the bonus token: the next step.
  if (drafter_ && !draft_.empty()) drafter_->observe(int(draft_.size()), row_);
  const int pos = position();                     // where `token` goes
  if (seq_.position() > pos) seq_.truncate(pos);  // the rejected drafts' rows
  draft_.clear();
  if (drafter_) {
    const EngineInfo& info = seq_.engine().info();
    const int room = std::min({draws_left - 1, info.ctx - pos - 1, info.max_step_tokens - 1});
    if (room > 0) drafter_->draft(room, draft_);
  }
  std::vector<int32_t> step;
  step.reserve(draft_.size() + 1);
  step.push_back(token);
  step.insert(step.end(), draft_.begin(), draft_.end());
  // Drawn tokens: the decode path.
  if (engine_draws_) drawn_ = seq_.draw(step, 0, /*prompt=*/false);
  else rows_ = seq_.eval(step, 0, /*prompt=*/false);
  base_ = pos;
  row_ = 0;
  ++stats_.steps;
  stats_.drafted += int64_t(draft_.size());
}

void SpeculativeDecoder::finish() {
  if (seq_.position() > position()) seq_.truncate(position());
  draft_.resize(std::min(draft_.size(), size_t(row_)));
}

}  // namespace futr::runtime
