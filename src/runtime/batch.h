// The checks every Engine runs on a step's rows before computing anything
// (the contract in runtime/engine.h), written once so that the CPU engines
// and the GPU engine refuse the same batches with the same messages.
//
// plan_batch() cuts the rows into runs (the rows of one sequence, contiguous)
// and checks, for every row: the sequence is open, the token and (kLogprob)
// the target are inside the vocabulary, the output kind is valid; for every
// run: the sequence has no other run in this batch, its first row is at
// pos == length(seq), each next row at pos + 1, and length + rows <= ctx;
// for the batch: at most max_step_tokens rows. The first violation throws
// futr::Error naming the row, the sequence and the rule.
//
// Tests: tests/runtime/engine_test.cpp (through every CPU engine).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "runtime/engine.h"

namespace futr::runtime {

struct SeqRun {
  SeqId seq = 0;
  int begin = 0;      // first row of the run in the batch
  int end = 0;        // one past its last row
  int first_out = 0;  // first row in [begin, end) with out != kNone (end if none)
  int pos0 = 0;       // length(seq) before the step
};

struct BatchPlan {
  std::vector<SeqRun> runs;  // in batch order
  int n_logits = 0;          // rows with kLogits
  int n_tokens = 0;          // rows with kToken
  int n_logprobs = 0;        // rows with kLogprob
};

// length_of(seq): the positions stored for an open sequence, -1 when `seq`
// is not open.
BatchPlan plan_batch(std::span<const BatchRow> rows, const EngineInfo& info,
                     const std::function<int(SeqId)>& length_of);

}  // namespace futr::runtime
