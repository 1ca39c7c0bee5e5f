// The paging contract's checks shared by the engines' paged-cache tests
// (tests/cpu_engine/paged_kv_test.cpp, tests/gpu_engine/paged_test.cpp): the
// rows of one sequence's tokens, two steps' results compared bit for bit
// (logits, tokens, log-probabilities), a paging engine with every block free,
// and running out of blocks as an error that changes nothing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "support/expect_error.h"

namespace futr::test {

// Rows for `tokens` of `seq` from position `pos`, each asking for `out`
// (kLogprob: of `target`), given (prompt) or drawn.
inline std::vector<runtime::BatchRow> rows_of(runtime::SeqId seq, const std::vector<int32_t>& tokens, int pos,
                                              runtime::RowOutput out, bool prompt, int32_t target) {
  std::vector<runtime::BatchRow> r;
  for (size_t i = 0; i < tokens.size(); ++i) r.push_back({tokens[i], seq, pos + int(i), out, target, prompt});
  return r;
}

// a and b have the same bits: logits, tokens and log-probabilities.
inline void expect_same_results(const runtime::StepResult& a, const runtime::StepResult& b,
                                const std::string& what) {
  ASSERT_EQ(a.logits.data.size(), b.logits.data.size()) << what;
  if (!a.logits.data.empty()) {
    EXPECT_EQ(std::memcmp(a.logits.ptr(), b.logits.ptr(), a.logits.data.size() * sizeof(float)), 0)
        << what << ": logits differ";
  }
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.logprobs, b.logprobs) << what;
}

// A paging engine holds no block: every block free (or cached with no owner).
inline void expect_all_blocks_free(const runtime::Engine& e) {
  const nlohmann::json s = e.stats();
  EXPECT_EQ(s["kv_paged"]["blocks_used"], 0) << s.dump();
  EXPECT_EQ(s["kv_paged"]["blocks_free"], s["kv_paged"]["blocks"]) << s.dump();
  EXPECT_EQ(e.free_positions(), e.info().kv_blocks * e.info().kv_block_size);
}

// An engine of 5 blocks of B positions, sequences 1 and 2 not open, token ids
// below `vocab`: a step that needs more blocks than are free throws before it
// changes anything; the blocks come back when the sequences close.
inline void expect_out_of_blocks_changes_nothing(runtime::Engine& e, int vocab) {
  const int B = e.info().kv_block_size;
  ASSERT_EQ(e.info().kv_blocks, 5);
  EXPECT_EQ(e.free_positions(), 5 * B);
  std::mt19937 rng(3);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(1 + rng() % uint32_t(vocab - 1));
    return t;
  };
  e.open(1);
  e.open(2);
  e.step(rows_of(1, tokens(2 * B + B / 2), 0, runtime::RowOutput::kNone, true, -1));  // 3 blocks
  EXPECT_EQ(e.free_blocks(), 2);
  EXPECT_EQ(e.blocks_needed(2, 2 * B + 1), 3);
  EXPECT_FUTR_ERROR(e.step(rows_of(2, tokens(2 * B + 1), 0, runtime::RowOutput::kNone, true, -1)),
                    "out of KV blocks");
  EXPECT_EQ(e.length(2), 0);
  EXPECT_EQ(e.free_blocks(), 2);
  e.step(rows_of(2, tokens(2 * B), 0, runtime::RowOutput::kLogits, true, -1));
  EXPECT_EQ(e.free_blocks(), 0);
  e.close(1);
  e.close(2);
  EXPECT_EQ(e.free_blocks(), 5);
}

}  // namespace futr::test
