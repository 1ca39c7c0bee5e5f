// SequenceTable: the sequence bookkeeping every Engine (runtime/engine.h) does
// the same way, written once (the CPU engines and the GPU engine used to carry
// a copy each): open ids -> slots, each slot's length and Sampler, and the
// checks and messages of open / truncate / close / length.
//
// A slot is an index in [0, max_seqs): the engine keeps its per-sequence
// storage (a KV cache, a slot region of the device cache) in an array indexed
// by it. open() takes the lowest free slot, so a reopened sequence reuses what
// the last one left (the CPU caches are allocated on first use). Lengths are
// the table's: an engine calls set_length() after it stored positions.
//
// Every misuse throws futr::Error naming the id and changes nothing:
//   open of an open id ("is already open"), open with every slot in use ("all
//   N sequences are in use"), a sampler configuration out of range (the
//   Sampler's message), truncate beyond the length, any call on an id that is
//   not open ("sequence N is not open").
//
// Tests: tests/runtime/sequence_table_test.cpp; through every engine in
// tests/runtime/engine_test.cpp and tests/gpu_engine/engine_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace futr::runtime {

class SequenceTable {
 public:
  SequenceTable() = default;
  // max_seqs >= 1 sequences of at most ctx >= 1 positions each.
  SequenceTable(int max_seqs, int ctx);

  // Opens `id` in the lowest free slot with its sampler; returns the slot.
  int open(SeqId id, const SamplerConfig& sampling);
  // Keeps positions [0, len) of `id`; returns its slot.
  int truncate(SeqId id, int len);
  // Closes `id`; returns the slot it freed.
  int close(SeqId id);

  bool is_open(SeqId id) const { return index_.count(id) != 0; }
  int slot(SeqId id) const;    // futr::Error if not open
  int length(SeqId id) const;  // futr::Error if not open
  // plan_batch()'s length_of: the length, or -1 when `id` is not open.
  int length_or_closed(SeqId id) const;

  // Per slot (an open one).
  int slot_length(int slot) const { return slots_[size_t(slot)].len; }
  void set_length(int slot, int len);  // 0 <= len <= ctx (FUTR_ASSERT: an engine bug otherwise)
  Sampler& sampler(int slot) { return *slots_[size_t(slot)].sampler; }
  const Sampler& sampler(int slot) const { return *slots_[size_t(slot)].sampler; }

  int max_seqs() const { return int(slots_.size()); }
  int ctx() const { return ctx_; }
  int open_count() const { return int(index_.size()); }
  int free_sequences() const { return max_seqs() - open_count(); }
  // Positions still free: ctx for every free slot, ctx - length for every open one.
  int64_t free_positions() const;
  int64_t positions_used() const;  // sum of the open sequences' lengths

 private:
  struct Slot {
    std::optional<Sampler> sampler;  // set while open
    int len = 0;                     // positions stored
    bool open = false;
  };
  int ctx_ = 0;
  std::vector<Slot> slots_;               // [max_seqs]
  std::unordered_map<SeqId, int> index_;  // open id -> slot
};

// An Engine whose bookkeeping is a SequenceTable and an EngineInfo (the GPU
// engines): the queries of the contract answered from them.
class TableEngine : public Engine {
 public:
  bool is_open(SeqId id) const override { return table_.is_open(id); }
  int length(SeqId id) const override { return table_.length(id); }
  int64_t free_positions() const override { return table_.free_positions(); }
  int free_sequences() const override { return table_.free_sequences(); }
  const EngineInfo& info() const override { return info_; }

 protected:
  SequenceTable table_;
  EngineInfo info_;
};

}  // namespace futr::runtime
