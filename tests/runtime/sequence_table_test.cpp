// runtime::SequenceTable (src/runtime/sequence_table.h): slots, lengths,
// samplers, free positions, and every misuse refused with the id named and
// nothing changed. The engines' use of it is tested through the Engine
// contract (tests/runtime/engine_test.cpp, tests/gpu_engine/engine_test.cpp).
#include <gtest/gtest.h>

#include "runtime/sequence_table.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

TEST(SequenceTable, OpensInTheLowestFreeSlotAndCountsPositions) {
  SequenceTable t(3, 100);
  EXPECT_EQ(t.free_sequences(), 3);
  EXPECT_EQ(t.free_positions(), 300);
  EXPECT_EQ(t.open(10, {}), 0);
  EXPECT_EQ(t.open(-7, {}), 1);
  EXPECT_EQ(t.open(42, {}), 2);
  EXPECT_EQ(t.free_sequences(), 0);
  t.set_length(t.slot(-7), 30);
  t.set_length(t.slot(42), 100);
  EXPECT_EQ(t.length(-7), 30);
  EXPECT_EQ(t.slot_length(1), 30);
  EXPECT_EQ(t.positions_used(), 130);
  EXPECT_EQ(t.free_positions(), 170);
  EXPECT_EQ(t.close(-7), 1);
  EXPECT_FALSE(t.is_open(-7));
  EXPECT_EQ(t.free_positions(), 200);
  EXPECT_EQ(t.open(5, {}), 1);  // the freed slot, reused
  EXPECT_EQ(t.length(5), 0);
  EXPECT_EQ(t.truncate(42, 60), 2);
  EXPECT_EQ(t.length(42), 60);
  EXPECT_EQ(t.truncate(42, 0), 2);
  EXPECT_EQ(t.length_or_closed(42), 0);
  EXPECT_EQ(t.length_or_closed(-7), -1);
}

TEST(SequenceTable, EachSlotHasItsOwnSampler) {
  SequenceTable t(2, 8);
  SamplerConfig hot;
  hot.temperature = 0.7f;
  t.open(1, {});
  t.open(2, hot);
  EXPECT_TRUE(t.sampler(t.slot(1)).plain_greedy());
  EXPECT_FALSE(t.sampler(t.slot(2)).plain_greedy());
  EXPECT_FLOAT_EQ(t.sampler(t.slot(2)).config().temperature, 0.7f);
}

TEST(SequenceTable, RefusesMisuseAndChangesNothing) {
  EXPECT_FUTR_ERROR(SequenceTable(0, 8), "sequences must be >= 1");
  EXPECT_FUTR_ERROR(SequenceTable(1, 0), "context");
  SequenceTable t(2, 8);
  t.open(1, {});
  t.set_length(0, 5);
  EXPECT_FUTR_ERROR(t.open(1, {}), "sequence 1 is already open");
  SamplerConfig bad;
  bad.top_p = 0.0f;
  EXPECT_FUTR_ERROR(t.open(2, bad), "top-p");
  EXPECT_FALSE(t.is_open(2));
  t.open(2, {});
  EXPECT_FUTR_ERROR(t.open(3, {}), "all 2 sequences are in use");
  EXPECT_FUTR_ERROR(t.truncate(1, 6), "cannot truncate sequence 1 of 5 positions to 6");
  EXPECT_FUTR_ERROR(t.truncate(1, -1), "cannot truncate");
  EXPECT_EQ(t.length(1), 5);
  EXPECT_FUTR_ERROR(t.length(9), "sequence 9 is not open");
  EXPECT_FUTR_ERROR(t.close(9), "sequence 9 is not open");
  EXPECT_FUTR_ERROR(t.slot(9), "sequence 9 is not open");
  EXPECT_EQ(t.open_count(), 2);
}

}  // namespace
}  // namespace futr::runtime
