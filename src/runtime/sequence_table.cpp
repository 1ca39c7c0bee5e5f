// Sequence bookkeeping shared by the engines (see sequence_table.h).
#include "runtime/sequence_table.h"

#include "core/error.h"

namespace futr::runtime {

SequenceTable::SequenceTable(int max_seqs, int ctx) : ctx_(ctx), slots_(size_t(max_seqs > 0 ? max_seqs : 0)) {
  FUTR_CHECK(max_seqs >= 1, "the maximum number of sequences must be >= 1 (got {})", max_seqs);
  FUTR_CHECK(ctx >= 1, "the context must be >= 1 position (got {})", ctx);
}

int SequenceTable::open(SeqId id, const SamplerConfig& sampling) {
  FUTR_CHECK(!is_open(id), "sequence {} is already open", id);
  FUTR_CHECK(free_sequences() > 0, "cannot open sequence {}: all {} sequences are in use", id, max_seqs());
  Sampler sampler(sampling);  // validates before anything changes
  size_t s = 0;
  while (slots_[s].open) ++s;
  slots_[s].sampler.emplace(std::move(sampler));
  slots_[s].len = 0;
  slots_[s].open = true;
  index_.emplace(id, int(s));
  return int(s);
}

int SequenceTable::slot(SeqId id) const {
  const auto it = index_.find(id);
  FUTR_CHECK(it != index_.end(), "sequence {} is not open", id);
  return it->second;
}

int SequenceTable::truncate(SeqId id, int len) {
  const int s = slot(id);
  Slot& slot = slots_[size_t(s)];
  FUTR_CHECK(len >= 0 && len <= slot.len, "cannot truncate sequence {} of {} positions to {}", id, slot.len,
             len);
  slot.len = len;
  return s;
}

int SequenceTable::close(SeqId id) {
  const int s = slot(id);
  Slot& slot = slots_[size_t(s)];
  slot.sampler.reset();
  slot.len = 0;
  slot.open = false;
  index_.erase(id);
  return s;
}

int SequenceTable::length(SeqId id) const { return slots_[size_t(slot(id))].len; }

int SequenceTable::length_or_closed(SeqId id) const {
  const auto it = index_.find(id);
  return it == index_.end() ? -1 : slots_[size_t(it->second)].len;
}

void SequenceTable::set_length(int slot, int len) {
  FUTR_ASSERT(slot >= 0 && slot < max_seqs() && slots_[size_t(slot)].open && len >= 0 && len <= ctx_);
  slots_[size_t(slot)].len = len;
}

int64_t SequenceTable::positions_used() const {
  int64_t used = 0;
  for (const auto& [id, s] : index_) used += slots_[size_t(s)].len;
  return used;
}

int64_t SequenceTable::free_positions() const { return int64_t(max_seqs()) * ctx_ - positions_used(); }

}  // namespace futr::runtime
